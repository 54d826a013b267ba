"""``results.json``: one file per run, written atomically, that every later tool reads."""

from __future__ import annotations

import json
import logging
import os
import platform
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

PACKAGES = ("pelab", "torch", "lightning", "hydra-core", "wandb", "datasets")


def write_json_atomic(path: str | Path, data: dict[str, Any]) -> Path:
    """Write ``data`` as JSON via a temporary file and ``os.replace``: readers see the old file or
    the complete new one, never a partial write."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, sort_keys=False, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def environment() -> dict[str, Any]:
    """Library versions, Python, and the git commit of the working directory (if any)."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    commit = _git("rev-parse", "HEAD")
    changes = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "versions": versions,
        "python": platform.python_version(),
        "git_commit": commit,
        "git_dirty": None if changes is None else bool(changes),  # uncommitted changes to code
    }


def _git(*args: str) -> str | None:
    """``git <args>`` in pelab's source tree; None outside a git checkout."""
    try:
        return subprocess.run(
            ["git", *args],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).parent,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def per_length(metrics: dict[str, float], split: str) -> dict[str, dict[str, float]]:
    """``{"test/exact_match/len_16": x, ...}`` -> ``{"16": {"exact_match": x, ...}, ...}``."""
    table: dict[str, dict[str, float]] = {}
    prefix = f"{split}/"
    for key, value in metrics.items():
        if key.startswith(prefix) and "/len_" in key:
            metric, length = key[len(prefix) :].split("/len_")
            table.setdefault(length, {})[metric] = value
    return dict(sorted(table.items(), key=lambda kv: int(kv[0])))


def group_metrics(metrics: dict[str, float], prefix: str) -> dict[str, float]:
    """``{"test/id/exact_match": x}`` with prefix ``test/id/`` -> ``{"exact_match": x}``."""
    return {k[len(prefix) :]: v for k, v in metrics.items() if k.startswith(prefix)}


def summarize(metrics: dict[str, float]) -> dict[str, Any]:
    """The ``metrics`` section of ``results.json``: test per length, its in- and out-of-
    distribution means, and the last validation per length (when there was one)."""
    summary = {
        "test": per_length(metrics, "test"),
        "test_id": group_metrics(metrics, "test/id/"),
        "test_ood": group_metrics(metrics, "test/ood/"),
    }
    if val := per_length(metrics, "val"):
        summary["val"] = val
    return summary


def failure_reason(error: BaseException) -> str:
    """``error`` as one line for ``results.json``; interruptions say how to resume."""
    resume = "re-run the same command in the same output directory to resume from last.ckpt"
    causes = {type(e).__name__ for e in (error, error.__cause__, error.__context__) if e}
    if "SIGTERMException" in causes:
        return f"interrupted by SIGTERM (pre-emption, a time limit or kill); {resume}"
    if "KeyboardInterrupt" in causes:
        return f"interrupted by Ctrl-C (KeyboardInterrupt); {resume}"
    return f"{type(error).__name__}: {error}"


@contextmanager
def recorded(path: str | Path, record: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Whatever happens inside, ``record`` ends up in ``path`` (atomically) with the wall time,
    the environment, and on an exception ``status: failed`` and the error; the exception is
    re-raised. The record is also written on entry, so a job killed outright (SIGKILL, out of
    memory) leaves its ``status: running``, never a finished-looking file."""
    start = time.perf_counter()
    write_json_atomic(path, {**record, **environment()})
    try:
        yield record
    except BaseException as error:
        record.update(status="failed", error=failure_reason(error))
        raise
    finally:
        record["wall_time_s"] = round(time.perf_counter() - start, 2)
        record.update(environment())
        write_json_atomic(path, record)
        log.info("results written to %s", path)
