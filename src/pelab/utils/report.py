"""The per-length results table printed at the end of a run."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from pelab.tasks.base import Task


def print_results(record: dict[str, Any], task: Task, console: Console | None = None) -> None:
    """Exact match and token accuracy per evaluation length, marked in/out of distribution, with
    the chance level of both (``metrics.chance``, when the record has it)."""
    c = record["choices"]
    lo, hi = task.train_lengths
    title = f"{c['pe']} · {c['task']} · {c['model']} · seed {c['seed']}"
    table = Table(title=f"{title}  (trained on lengths {lo}-{hi})")
    chance = record["metrics"].get("chance", {})
    columns = [f"length ({task.length_axis})", "split", "exact match", "token acc"]
    for column in columns + (["chance (exact/token)"] if chance else []):
        table.add_column(column, justify="right")
    for length, m in record["metrics"]["test"].items():
        split = "in-dist" if task.in_distribution(int(length)) else "extrapolation"
        row = [length, split, f"{m['exact_match']:.1%}", f"{m['token_acc']:.1%}"]
        if chance:
            row.append(f"{chance[length]['exact_match']:.1%} / {chance[length]['token_acc']:.1%}")
        table.add_row(*row)
    (console or Console()).print(table)
