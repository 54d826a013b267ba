"""One writer per run directory (issue 29, item 4): a run holds ``<output_dir>/.pelab.lock``
(``fcntl.flock``, exclusive) for its whole life, so a second job for the same directory (a sweep
re-run while its jobs still run, a run started twice by hand) cannot write its checkpoints and
records over the first one's.

The second one waits ``wait_s`` seconds at most (``run_lock_wait_s``; default 0: refuse at
once) and then stops with a ``ConfigError`` naming the directory and the holder (its host,
process id, SLURM job id and start time, which the holder writes into the lock file). The lock
dies with its process (a killed or requeued job releases it at once), so a stale lock file never
blocks a resume."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pelab.errors import ConfigError
from pelab.reliability.cluster.requeue import job_id

LOCK_NAME = ".pelab.lock"
POLL_S = 0.5


def holder_text(path: Path) -> str:
    """Who holds the lock at ``path``, as its holder wrote it."""
    try:
        holder = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        holder = {}
    if not holder:
        return "an unknown process"
    parts = [f"process {holder.get('pid')} on {holder.get('host')}"]
    if holder.get("slurm_job"):
        parts.append(f"SLURM job {holder['slurm_job']}")
    if holder.get("since"):
        parts.append(f"since {holder['since']}")
    if holder.get("command"):
        parts.append(f"running: {holder['command']}")
    return ", ".join(parts)


@contextmanager
def run_lock(output_dir: str | Path, wait_s: float = 0.0) -> Iterator[Path]:
    """Hold the run directory's lock for the ``with`` block; a ``ConfigError`` when another
    process holds it for longer than ``wait_s`` seconds."""
    directory = Path(output_dir)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + max(0.0, float(wait_s))
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    waited = f" (waited {wait_s:g} s)" if wait_s else ""
                    raise ConfigError(
                        f"{directory} is in use by another run: {holder_text(path)}{waited}. "
                        "One run writes a directory at a time: wait for it to end (or cancel "
                        "it), then run again (resume=true continues from its checkpoint); "
                        "run_lock_wait_s=<seconds> waits for it"
                    ) from None
                time.sleep(POLL_S)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(_holder()).encode())
        os.fsync(fd)
        yield path
    finally:
        os.close(fd)  # releases the lock; the file stays (removing it would race a waiter)


def busy(output_dir: str | Path) -> str | None:
    """Who holds ``output_dir``'s lock now (``holder_text``); None when no run holds it. What a
    launcher checks before submitting a job into the directory."""
    path = Path(output_dir) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return holder_text(path)
    finally:
        os.close(fd)
    return None


def _holder() -> dict[str, Any]:
    import sys

    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "slurm_job": job_id(),  # an array task as <array job>_<task>, as scontrol takes it
        "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
    }
