"""The per-length results table printed at the end of a run."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from pelab.tasks.base import Task


def print_results(record: dict[str, Any], task: Task, console: Console | None = None) -> None:
    """Exact match and token accuracy per evaluation length, marked in/out of distribution."""
    c = record["choices"]
    lo, hi = task.train_lengths
    title = f"{c['pe']} · {c['task']} · {c['model']} · seed {c['seed']}"
    table = Table(title=f"{title}  (trained on lengths {lo}-{hi})")
    for column in ("length", "split", "exact match", "token acc"):
        table.add_column(column, justify="right")
    for length, m in record["metrics"]["test"].items():
        split = "in-dist" if task.in_distribution(int(length)) else "extrapolation"
        table.add_row(length, split, f"{m['exact_match']:.1%}", f"{m['token_acc']:.1%}")
    (console or Console()).print(table)
