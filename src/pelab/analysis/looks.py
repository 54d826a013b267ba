"""The record of each look (issue 52, item 3): when ``make_table.py --add-seeds`` planned seeds
after looking at a table, what it saw and what it added, kept as ``looks.json`` in every sweep
directory that receives the seeds (a list, one entry per look, appended atomically).

The tests need no record to stay valid (``sequential``: every planned look is counted, taken
or not); the record is what lets a reader audit how the seeds came to be: the tables and
``report.html`` list the looks found under their sources (``found``, ``lines``).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from pelab.analysis.sequential import ALPHA, LOOKS, shares
from pelab.record import write_json_atomic

LOOKS_FILE = "looks.json"
DESIGN = {
    "looks": list(LOOKS),
    "alpha": ALPHA,
    "spent": [round(share * ALPHA, 5) for share in shares(LOOKS)],
    "spending": "Lan-DeMets Pocock-type, Bonferroni over the looks",
}


def entry(metric: str, split: str, seen: list[dict[str, Any]], added: list[dict[str, Any]]):
    """One look: now, the design, the comparisons seen (name, p, the look they asked for) and
    the seeds added (settings, seeds, where)."""
    return {
        "date": datetime.now().astimezone().isoformat(timespec="seconds"),
        "design": DESIGN,
        "metric": metric,
        "split": split,
        "seen": seen,
        "added": added,
    }


def append(directory: Path, look: dict[str, Any]) -> Path:
    """Add ``look`` to ``directory``'s ``looks.json``."""
    path = Path(directory) / LOOKS_FILE
    earlier = json.loads(path.read_text()) if path.is_file() else []
    return write_json_atomic(path, [*earlier, look])


def found(sources: list[str | Path]) -> list[tuple[Path, dict[str, Any]]]:
    """Every look recorded under the directories ``sources``, oldest first."""
    looks = []
    for source in sources:
        if not Path(source).is_dir():
            continue
        for path in sorted(Path(source).rglob(LOOKS_FILE)):
            looks += [(path, look) for look in json.loads(path.read_text())]
    return sorted(looks, key=lambda item: str(item[1].get("date")))


def lines(looks: list[tuple[Path, dict[str, Any]]]) -> list[str]:
    """One line per look: when, which column, how many comparisons it saw, what it added."""
    out = []
    for path, look in looks:
        added = look.get("added") or []
        seeds = sum(len(a.get("seeds") or []) for a in added)
        out.append(
            f"{str(look.get('date'))[:16].replace('T', ' ')}: {look.get('metric')} "
            f"{look.get('split')} columns, {len(look.get('seen') or [])} undecided comparisons "
            f"seen, {seeds} seeds added to {len(added)} cells ({_shown(path)})"
        )
    return out


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when below it (tables travel)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
