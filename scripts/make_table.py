"""Ablation tables and figures of a sweep: ``python scripts/make_table.py <sweep dir>
[<more dirs>] [--out DIR] [--metric token_acc] [--filter KEY=VALUE] [--wandb] [--baseline NAME]
[--save-baseline SWEEP_DIR NAME]``; ``--help`` lists the options (``pelab.analysis.report``)."""

import sys

from pelab.analysis.report import main

if __name__ == "__main__":
    sys.exit(main())
