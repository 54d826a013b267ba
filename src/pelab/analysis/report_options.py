"""The options of ``scripts/make_table.py`` (``parse``; ``pelab.analysis.report`` runs them):
the sources, filters, tables and figures to write, and the baselines (``baseline_options``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pelab.analysis.collect import WANDB_PREFIX
from pelab.analysis.latex_layout import SPANS
from pelab.analysis.protocols import PROTOCOLS
from pelab.metrics import METRICS


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not (key and sep):
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def renaming(text: str) -> tuple[str, str]:
    """``--label``'s ``OLD=NEW``, split at the last ``=`` (a label holds ``setting=value``)."""
    old, sep, new = text.rpartition("=")
    if not (old and sep and new):
        raise argparse.ArgumentTypeError(f"expected OLD=NEW, got {text!r}")
    return old, new


# what ``make_table.py --help`` opens with: for a user, what the command does and its common
# forms (this module's docstring is for developers and is not shown)
DESCRIPTION = """\
Tables, figures and one HTML report of trained runs: reads the results.json
files below the directories given (or a W&B project's runs) and writes them
into <first directory>/summary/, or into --out DIR (a second call into the
same directory replaces its files). Common forms:

  python scripts/make_table.py <sweep dir>
      the tables of one sweep, e.g. logs/ablation_cpu/multiruns/<date>_<time>
  python scripts/make_table.py <sweep dir> --baseline ablation_cpu
      your runs beside the shipped runs of baselines/ablation_cpu
  python scripts/make_table.py <sweep dir> --reference pe=rope
      also every row against RoPE's, per column (table_vs_rope.*)
  python scripts/make_table.py <sweep dir> --metric token_acc --out paper
      token accuracy first, into paper/ (<sweep dir>/summary/ left as it is)
  python scripts/make_table.py logs --list
      the runs under logs/, one line per job; writes nothing

Every file and what a cell means: docs/tables.md."""


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="make_table.py",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,  # the forms, one per line
        parents=[baseline_options()],
    )
    parser.add_argument("sources", nargs="+", help="run directories or wandb:<entity>/<project>")
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="output directory (default: <first directory>/summary, for W&B "
        "logs/summary/<entity>_<project>); a second call into the same directory replaces "
        "its files",
    )
    parser.add_argument(
        "--tex-span",
        choices=SPANS,
        default="auto",
        help="each .tex table in one column of a two-column paper (column: table), across "
        "both (page: table*), or chosen by its width (auto); shrunk to fit, never enlarged",
    )
    parser.add_argument(
        "--metric",
        choices=METRICS,
        default="exact_match",
        help="the metric shown first (every metric is tabulated and drawn, each in its own "
        "files), and the metric of --published numbers",
    )
    parser.add_argument(
        "--filter",
        action="append",
        default=[],
        type=key_value,
        metavar="KEY=VALUE",
        help="keep the runs with this value (any of several: pe=rope,alibi; a key given twice "
        "takes either): pe=rope, task=copy, seed=0, tag=cpu, group=<sweep>, date=2026-11-24, "
        "config.<key>=<value>; it narrows --baseline's runs too (W&B sources: W&B's own filter "
        "keys, one value each, e.g. sweep=<id>); pe=... narrows the rows shown, not the rows "
        "--reference compares",
    )
    parser.add_argument(
        "--reference",
        metavar="SETTING=VALUE[,...]",
        help="also compare rows with this one, per column (Welch at the planned looks, Holm "
        "over --compare's family): table_vs_<value>.{md,tex,csv}; e.g. pe=rope or pe=none "
        "(pelab.analysis.reference)",
    )
    parser.add_argument(
        "--compare",
        metavar="SETTING=VALUE[,...]",
        help="--reference's family: the rows compared with it, e.g. pe=mine,alibi (default: "
        "your rows beside a --baseline, else every row); Holm adjusts over these comparisons, "
        "whatever --filter pe=... shows",
    )
    parser.add_argument(
        "--label",
        action="append",
        default=[],
        type=renaming,
        metavar="OLD=NEW",
        help="rename a row's label or a part of one (split at the last '='), a --baseline's "
        "rows too, in the figures' legends and heatmap rows (in the .tex rows a value or a "
        "setting): "
        "'rope · attn_scale=ssmax=RoPE + SSMax', 'attn_scale=logn=log n'; the figures label a "
        "row by its encoding and the settings the rows differ in, and add '(yours)' or "
        "'(<baseline>)' only where your row and a baseline's share a label (rename it whole: "
        "'rope (ablation_cpu)=RoPE, shipped')",
    )
    parser.add_argument(
        "--published",
        type=Path,
        help="a CSV of published numbers (pe, task, length, value, source) to overlay on the "
        "length curves",
    )
    parser.add_argument(
        "--protocol",
        choices=list(PROTOCOLS),
        default="mean",
        help="mean: over seeds; tuned: per encoding and task the learning rate with the best "
        "in-distribution validation; max: the best run over seeds (and learning rates) by "
        "in-distribution validation (Deletang et al. 2023)",
    )
    parser.add_argument(
        "--wandb",
        action="store_true",
        help="also log the summary as one W&B run (job_type=summary; offline unless logged in)",
    )
    parser.add_argument(
        "--no-wandb",
        action="store_true",
        help="no longer needed: nothing is logged to W&B without --wandb (kept so that older "
        "commands still run)",
    )
    parser.add_argument(
        "--add-seeds",
        action="store_true",
        help="print the jobs that add seeds, to the next planned look, where they decide an "
        "undecided comparison (--reference's family, else each column's best), cheapest first "
        "within --budget, and record the look (looks.json); with --run, run them; writes no "
        "table (pelab.analysis.add_seeds)",
    )
    parser.add_argument("--budget", default="30min", help="--add-seeds: 30min, 2h, 90s, ...")
    parser.add_argument(
        "--split",
        choices=["ID", "OOD", "all"],
        default="OOD",
        help="--add-seeds: the columns whose comparisons to decide",
    )
    parser.add_argument("--run", action="store_true", help="--add-seeds: run the jobs it prints")
    parser.add_argument(
        "--list",
        action="store_true",
        help="print a compact list of the runs (date, encoding, task, seeds, learned, ID/OOD, "
        "wall time, directory), one line per job, and write nothing",
    )
    args = parser.parse_args(argv)
    if args.no_wandb:
        print("note: --no-wandb is no longer needed (W&B only with --wandb)", file=sys.stderr)
    return args


def default_out(source: str) -> Path:
    if source.startswith(WANDB_PREFIX):
        return Path("logs/summary") / source[len(WANDB_PREFIX) :].replace("/", "_")
    return Path(source) / "summary"


def baseline_options() -> argparse.ArgumentParser:
    """``--baseline`` and ``--save-baseline``: read first by ``main`` to choose what to do, and
    a parent of the tables' options (``parse``), so ``--help`` lists every option."""
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("baselines (baselines/README.md)")
    group.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="NAME",
        help="put the runs beside the shipped runs of baselines/NAME (e.g. ablation_cpu) in one "
        "table; refused when their protocols differ",
    )
    group.add_argument(
        "--save-baseline",
        nargs=2,
        metavar=("SWEEP_DIR", "NAME"),
        help="copy the results.json files of SWEEP_DIR into baselines/NAME (replacing it), "
        "machine paths made relative, and write nothing else",
    )
    return parser
