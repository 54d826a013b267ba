"""What code a run ran (issue 52, item 5): the git commit of pelab's checkout and, when the code
differs from it, what rebuilds it.

The code is what decides what a run trains: ``CODE_PATHS`` (``src/``, ``configs/``,
``scripts/`` and ``pyproject.toml``). A run is ``git_dirty`` when a tracked file there differs
from the commit or an untracked one lies there (a new encoding's module and config before they
are committed), so a record never names a clean commit that lacks its code. A dirty run keeps
``git_changes`` (``git status --porcelain`` lines: ``M src/...``, ``?? configs/pe/mine.yaml``)
and ``git_patch``, one patch of the tracked changes and the untracked files as new files, which
rebuilds the code on top of the commit::

    git checkout <git_commit> && python -c "import json,sys; \
        sys.stdout.write(json.load(open('results.json'))['git_patch'])" | git apply

``git_patch_sha256`` identifies it; a patch over ``PATCH_LIMIT`` bytes is left out (null) and
only its hash and the changed paths are kept. Taken once per process (``code_state``): the code
a process imported at its start is the code its runs ran.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path
from typing import Any

CODE_PATHS = ("src", "configs", "scripts", "pyproject.toml")
PATCH_LIMIT = 512 * 1024  # bytes of patch a record keeps (a new encoding's files: a few kB)


@functools.cache
def code_state() -> dict[str, Any]:
    """The code of pelab's own checkout (``code_of``), taken once per process."""
    return code_of(Path(__file__).parent)


def code_of(directory: Path) -> dict[str, Any]:
    """``git_commit``, ``git_dirty`` and, when dirty, ``git_changes``, ``git_patch`` and
    ``git_patch_sha256`` of the checkout ``directory`` lies in (see the module docstring); the
    commit and dirty flag are None outside a git checkout."""
    root = _git(directory, "rev-parse", "--show-toplevel")
    commit = _git(directory, "rev-parse", "HEAD") if root else None
    if root is None or commit is None:
        return {"git_commit": None, "git_dirty": None}
    top = Path(root)
    status = _git(
        top, "status", "--porcelain", "--untracked-files=all", "--", *CODE_PATHS, strip=False
    )
    if status is None:
        return {"git_commit": commit, "git_dirty": None}
    changes = [line.strip() for line in status.splitlines() if line.strip()]
    if not changes:
        return {"git_commit": commit, "git_dirty": False}
    untracked = [line[3:] for line in changes if line.startswith("??")]
    patch = (
        _git(top, "diff", "--binary", "HEAD", "--", *CODE_PATHS, strip=False) or ""
    ) + "".join(_new_file_patch(top, path) for path in untracked)
    digest = hashlib.sha256(patch.encode()).hexdigest()
    return {
        "git_commit": commit,
        "git_dirty": True,
        "git_changes": changes,
        "git_patch": patch if len(patch.encode()) <= PATCH_LIMIT else None,
        "git_patch_sha256": digest,
    }


def summary(record: dict[str, Any]) -> str:
    """A record's code in a few words: ``8129362 clean``, ``8129362 + 2 changes (?? src/...,
    ...) patch 1a2b3c4d``, ``unknown`` outside a checkout."""
    commit = record.get("git_commit")
    if not commit:
        return "unknown"
    short = str(commit)[:7]
    if record.get("git_dirty") is None:
        return f"{short} (dirty: unknown)"
    if not record.get("git_dirty"):
        return f"{short} clean"
    changes = record.get("git_changes")
    if changes is None:  # a record from before the changes were kept
        return f"{short} dirty (changes not recorded)"
    listed = ", ".join(changes[:3]) + (", ..." if len(changes) > 3 else "")
    kept = "patch kept" if record.get("git_patch") is not None else "patch too large, not kept"
    digest = str(record.get("git_patch_sha256") or "")[:8]
    return f"{short} + {len(changes)} changes ({listed}); {kept}, sha256 {digest}"


def _new_file_patch(root: Path, path: str) -> str:
    """An untracked file as a patch that creates it (``git diff --no-index /dev/null path``)."""
    return (
        _git(
            root, "diff", "--binary", "--no-index", "--", "/dev/null", path, strip=False, ok=(0, 1)
        )
        or ""
    )


def _git(cwd: Path, *args: str, strip: bool = True, ok: tuple[int, ...] = (0,)) -> str | None:
    """``git <args>`` in ``cwd``; None outside a git checkout or without git."""
    try:
        done = subprocess.run(
            ["git", *args], capture_output=True, text=True, timeout=10, cwd=cwd, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode not in ok:
        return None
    return done.stdout.strip() if strip else done.stdout
