"""The errors a user can act on: ``ConfigError`` for bad input (every module imports it from
here), and ``storage_fault`` for a disk that refuses a write."""

from __future__ import annotations

import errno
import math
import os
import shutil
from collections.abc import Iterator

STORAGE_FAULTS = {
    errno.ENOSPC: "no space left on device (disk full)",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EFBIG: "file too large for this file system or limit",
}


class ConfigError(ValueError):
    """A configuration that cannot work, reported before any training starts: the message names
    the bad value and the valid choices."""


def storage_fault(error: BaseException) -> str | None:
    """What a disk refused, if that is why ``error`` happened (anywhere in its chain of causes,
    e.g. under torch's ``RuntimeError: [enforce fail at inline_container.cc]``): ``cannot write
    <file>: no space left on device (disk full); 0 B free there`` and what to do; None
    otherwise."""
    for cause in causes(error):
        if isinstance(cause, OSError) and cause.errno in STORAGE_FAULTS:
            what = STORAGE_FAULTS[cause.errno]
            where = cause.filename or getattr(error, "filename", None)
            target = f"cannot write {where}" if where else "a write failed"
            full = cause.errno in (errno.ENOSPC, errno.EDQUOT)
            if full and where:
                what += f"; {_free(str(where))} free there"
            remedy = "Free space or choose" if full else "Choose"
            return (
                f"{target}: {what}. {remedy} another output directory (hydra.run.dir=..., "
                "hydra.sweep.dir=...), then run the same command again (an interrupted run "
                "resumes from its last checkpoint)"
            )
    return None


def causes(error: BaseException | None) -> Iterator[BaseException]:
    """``error`` and its causes and contexts, each once."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _free(path: str) -> str:
    directory = path if os.path.isdir(path) else os.path.dirname(path) or "."
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return "unknown"
    power = min(int(math.log(max(free, 1), 1024)), 3)  # B, KiB, MiB, GiB
    return f"{free} B" if power == 0 else f"{free / 1024**power:.1f} {'BKMG'[power]}iB"
