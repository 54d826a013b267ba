"""Whose summary a directory holds (issue 52, item 4): ``make_table.py`` writes its files into
``--out`` (default ``<first source>/summary``) and a manifest, ``make_table.json``: the call and
the files it wrote. A later call into the same directory says so when the call differs (naming
it, and ``--out`` to keep both), and removes the files of the earlier call it does not write
again, so no stale table (a ``table_vs_rope.md`` of another reference) is left beside the new
ones."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

from pelab.record import write_json_atomic

MANIFEST = "make_table.json"


def claim(out: Path, call: str, written: list[Path]) -> Path:
    """Record ``call`` and ``written`` as ``out``'s summary; tell when it replaces another
    call's, and remove that call's files not written again."""
    path = out / MANIFEST
    names = sorted({str(Path(p).relative_to(out)) for p in written})
    earlier = json.loads(path.read_text()) if path.is_file() else None
    if earlier is not None:
        stale = sorted(set(earlier.get("files") or []) - set(names))
        for name in stale:
            (out / name).unlink(missing_ok=True)
        if earlier.get("call") != call:
            removed = (
                f"; removed {len(stale)} of its files this call does not write" if stale else ""
            )
            print(
                f"note: {out} held the summary of `{earlier.get('call')}` "
                f"({earlier.get('date')}): replaced{removed}; give --out <dir> to keep both",
                file=sys.stderr,
            )
    date = datetime.now().astimezone().isoformat(timespec="seconds")
    return write_json_atomic(path, {"call": call, "date": date, "files": names})
