"""``results.json``: one file per run, written atomically, that every later tool reads."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

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
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).parent,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"versions": versions, "python": platform.python_version(), "git_commit": commit}


def per_length(metrics: dict[str, float], split: str) -> dict[str, dict[str, float]]:
    """``{"test/exact_match/len_16": x, ...}`` -> ``{"16": {"exact_match": x, ...}, ...}``."""
    table: dict[str, dict[str, float]] = {}
    prefix = f"{split}/"
    for key, value in metrics.items():
        if key.startswith(prefix) and "/len_" in key:
            metric, length = key[len(prefix) :].split("/len_")
            table.setdefault(length, {})[metric] = value
    return dict(sorted(table.items(), key=lambda kv: int(kv[0])))
