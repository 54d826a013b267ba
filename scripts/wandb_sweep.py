"""Write an experiment's grid as a W&B sweep: ``python scripts/wandb_sweep.py ablation_cpu``
(then ``wandb sweep --project pelab <the file it names>`` and ``wandb agent ...``)."""

import sys
from pathlib import Path

from pelab.analysis.wandb_sweep import main

if __name__ == "__main__":
    sys.exit(main(Path(__file__).resolve().parents[1] / "configs", sys.argv[1:]))
