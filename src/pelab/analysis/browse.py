"""A compact list of runs: ``python scripts/make_table.py logs --list [--filter KEY=VALUE]``.

One line per job (a stack of members, ``seeds=[...]``, is one line with its seeds), newest
first: when it started, the encoding and task, the seeds, how many learned their task
(``k/n``; ``-`` without a criterion), the in- and out-of-distribution exact match (%, mean over
the seeds that completed), the wall time, the code that ran (its commit, ``+dirty`` when it
differed from it: ``provenance``) and the job's directory. Runs that did not complete
show their status in place of the scores."""

from __future__ import annotations

import math
from typing import Any

COLUMNS = ("date", "pe", "task", "seeds", "learned", "ID", "OOD", "wall", "code", "path")


def run_list(records: list[dict[str, Any]]) -> str:
    """The list of ``records`` (``collect.load_records``) as aligned text, a header first."""
    jobs: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        jobs.setdefault(str(record.get("job") or record.get("source")), []).append(record)
    rows = [_row(path, members) for path, members in jobs.items()]
    rows.sort(key=lambda row: row["date"], reverse=True)
    table = [list(COLUMNS), *([str(row[c]) for c in COLUMNS] for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in table
    )


def _row(path: str, members: list[dict[str, Any]]) -> dict[str, Any]:
    first = members[0]
    choices = first.get("choices") or {}
    done = [m for m in members if m.get("status") == "completed"]
    judged = [m for m in done if m.get("learned") is not None]
    learned = f"{sum(bool(m['learned']) for m in judged)}/{len(judged)}" if judged else "-"
    scores = {}
    for split in ("id", "ood"):
        values = [
            m["metrics"][f"test_{split}"]["exact_match"]
            for m in done
            if (m.get("metrics") or {}).get(f"test_{split}")
        ]
        scores[split] = f"{100 * sum(values) / len(values):.1f}" if values else "-"
    if not done:  # failed, crashed, missing, running: the status says why there is no score
        scores = {"id": first.get("status", "?"), "ood": ""}
    stack = first.get("member_of") or {}
    wall = stack.get("fit_time_s") or max((m.get("wall_time_s") or math.nan) for m in members)
    return {
        "date": str(first.get("started", ""))[:16].replace("T", " ") or "-",
        "pe": choices.get("pe") or "-",
        "task": choices.get("task") or "-",
        "seeds": ",".join(str((m.get("choices") or {}).get("seed")) for m in members),
        "learned": learned,
        "ID": scores["id"],
        "OOD": scores["ood"],
        "wall": _wall(wall),
        "code": _code(first),
        "path": path,
    }


def _wall(seconds: float) -> str:
    if seconds is None or math.isnan(seconds):
        return "-"
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


def _code(record: dict[str, Any]) -> str:
    """``8129362``, ``8129362+dirty`` (the record keeps the patch: ``provenance``), ``-``."""
    commit = record.get("git_commit")
    if not commit:
        return "-"
    return str(commit)[:7] + ("+dirty" if record.get("git_dirty") else "")
