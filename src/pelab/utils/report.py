"""The end of a run's console output: the per-length results table of the test, then one line
saying whether the run learned its task (``learned_line``). Learning is judged on the
validation set, during training; the table and the line's scores are the test's."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from pelab.tasks.base import Task


def print_results(record: dict[str, Any], task: Task, console: Console | None = None) -> None:
    """Test exact match and token accuracy per evaluation length, marked in/out of distribution,
    with the chance level of both (``metrics.chance``, when the record has it); then the
    ``learned_line`` (``table_title`` names the run)."""
    table = Table(title=table_title(record, task))
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
    console = console or Console()
    console.print(table)
    if record.get("job_type", "train") == "train":  # a re-evaluation did not train
        console.print(learned_line(record), highlight=False, markup=False, soft_wrap=True)


def table_title(record: dict[str, Any], task: Task) -> str:
    """``rope · copy · decoder · seed 0  (trained on lengths 1-8; test)``: a member of a stack
    over learning rates names its rate; a re-evaluation adds a line naming the encoding options
    it changed (``re-evaluated with pe.scaling=yarn, pe.scaling_factor=4``) or ``as trained``."""
    c = record["choices"]
    lo, hi = task.train_lengths
    title = f"{c['pe']} · {c['task']} · {c['model']} · seed {c['seed']}"
    if (record.get("member_of") or {}).get("learning_rates"):
        title += f" · lr {record['config']['model']['optimizer']['lr']:g}"
    title += f"  (trained on lengths {lo}-{hi}; test)"
    if record.get("job_type") == "eval":
        changed = [o for o in record.get("eval_overrides") or [] if o.startswith("pe.")]
        title += "\nre-evaluated " + (f"with {', '.join(changed)}" if changed else "as trained")
    return title


def learned_line(record: dict[str, Any]) -> str:
    """One line: ``learned at step N on the validation set (criterion)``, ``NOT learned by the
    cap``, or no criterion; each with the test's worst in-distribution exact match (a completed
    training record)."""
    config = record.get("config") or {}
    lo, hi = record["train_lengths"]
    inside = {
        int(n): v["exact_match"]
        for n, v in (record["metrics"].get("test") or {}).items()
        if lo <= int(n) <= hi
    }
    if inside:
        worst = min(inside, key=lambda n: (inside[n], n))
        score = f"test: worst in-distribution length {worst}: {inside[worst]:.1%} exact match"
    else:  # test=false
        score = "not tested (test=false)"
    cap = (config.get("trainer") or {}).get("max_steps")
    learned_at = config.get("learned_at")
    if record.get("learned") is None:
        return f"no criterion (learned_at=null): trained {cap} steps; {score}"
    patience = config.get("learned_patience")
    row = f", {patience} validations in a row" if patience else ""
    criterion = f"exact match >= {percent(learned_at)} at every in-distribution length{row}"
    if record["learned"]:
        return (
            f"learned at step {record['steps_to_learn']} on the validation set ({criterion}); "
            f"{score}"
        )
    return (
        f"NOT learned by the cap (trainer.max_steps={cap}) on the validation set (criterion: "
        f"{criterion}); {score}"
    )


def percent(fraction: float) -> str:
    """``0.998`` -> ``99.8%``, ``0.99`` -> ``99%`` (a threshold, never rounded up to 100%)."""
    return f"{fraction * 100:.10g}%"
