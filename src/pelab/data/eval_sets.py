"""Fixed evaluation sets, built once with the ``datasets`` library and cached on disk.

A set is ``task.sample_eval(split, n, length, generator)``, the generator seeded from the task's
``eval_seed``, the split and the length: ``n`` samples, or fewer for a task with fewer distinct
evaluation samples (``from_dataset``). The cache key hashes everything that changes the data (the
task's ``spec``, the split, the length, the number of samples asked for, the evaluation seed and
the format), so runs and sweeps that share a task share its sets. Each set directory holds a
manifest (``pelab.json``: the key, the row count and a SHA-256 of the contents); a set whose
manifest is missing or does not match what is read is corrupt or partial, and is rebuilt (with a
warning), never used. Writers take a per-set file lock and write to a temporary directory renamed
into place, so concurrent jobs building the same set build it once and a crashed writer never
leaves a half-written set under the final name. A set read and verified is kept for the process
(``_VERIFIED``) while its files stay as they were (names, inodes, sizes, modification times): a run
reads its test sets twice (its test, then the chance levels of what it was scored on), a
process's runs share their task's sets, and reading one was most of a short run's data time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any

import datasets
import torch
from filelock import FileLock

from pelab.tasks.base import Task

log = logging.getLogger(__name__)

# sets read and verified in this process, by directory: (its files' signature, the set);
# at most ``VERIFIED_KEPT``, the least recently read dropped first
_VERIFIED: OrderedDict[Path, tuple[tuple, datasets.Dataset]] = OrderedDict()
VERIFIED_KEPT = 64
FORMAT_VERSION = 4  # 2: sets carry a manifest with a checksum; 3: built by Task.sample_eval;
# 4: copy's repeated answers end with an end marker
MANIFEST = "pelab.json"
datasets.disable_progress_bars()  # sets are small; their progress bars would drown the log


def eval_seed(task: Task, split: str, length: int) -> int:
    """A seed for one (split, length) set, independent of the training seed."""
    text = f"{task.eval_seed}/{split}/{length}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def cache_spec(task: Task, split: str, length: int, n: int) -> dict[str, Any]:
    """Everything that changes a set's data."""
    return {
        **task.spec(),
        "split": split,
        "length": length,
        "n": n,
        "eval_seed": task.eval_seed,
        "format": FORMAT_VERSION,
    }


def cache_key(task: Task, split: str, length: int, n: int) -> str:
    spec = cache_spec(task, split, length, n)
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:16]


def checksum(data: datasets.Dataset) -> str:
    """SHA-256 of a set's contents (its columns as nested lists)."""
    columns = data.with_format(None)[:]
    return hashlib.sha256(json.dumps(columns, sort_keys=True).encode()).hexdigest()


def build_eval_set(task: Task, split: str, length: int, n: int) -> datasets.Dataset:
    generator = torch.Generator().manual_seed(eval_seed(task, split, length))
    prompt, answer = task.sample_eval(split, n, length, generator)
    return datasets.Dataset.from_dict({"prompt": prompt.tolist(), "answer": answer.tolist()})


def load_eval_set(
    task: Task, split: str, length: int, n: int, cache_dir: str | Path | None
) -> datasets.Dataset:
    """The ``split`` set of (up to) ``n`` samples at ``length``, from the cache when present and
    intact.

    Returned in torch format: items are ``{"prompt": [n_p], "answer": [m]}`` long tensors.
    """
    if cache_dir is None:
        return build_eval_set(task, split, length, n).with_format("torch")
    key = cache_key(task, split, length, n)
    path = Path(cache_dir) / f"{task.task_name}-{split}-len{length}-n{n}-{key}"
    data = read_verified(path, key, n)
    if data is None:
        locks = Path(cache_dir) / ".locks"
        locks.mkdir(parents=True, exist_ok=True)
        with FileLock(locks / f"{path.name}.lock"):  # one writer per set at a time
            data = read_verified(path, key, n)  # another job may have built it meanwhile
            if data is None:
                spec = cache_spec(task, split, length, n)
                data = write_set(build_eval_set(task, split, length, n), path, key, spec)
    return data


def read_verified(path: Path, key: str, n: int) -> datasets.Dataset | None:
    """The set at ``path``, in torch format, if it is complete and intact; None if absent, or
    (with a warning) if its manifest is missing or disagrees with its contents. A set this
    process verified is not read again while its files are unchanged (``_VERIFIED``)."""
    signature = files_signature(path)
    if signature is None:
        return None
    if path in _VERIFIED and _VERIFIED[path][0] == signature:
        _VERIFIED.move_to_end(path)
        return _VERIFIED[path][1]
    try:
        data = datasets.load_from_disk(str(path))
        problem = mismatch(json.loads((path / MANIFEST).read_text()), data, key, n)
    except Exception as error:  # unreadable: missing files, truncated arrow data, bad JSON
        problem = f"it cannot be read ({type(error).__name__}: {error})"
    if not problem:
        return kept(path, signature, data)
    log.warning("evaluation set %s is corrupt or partial (%s): rebuilding it", path, problem)
    return None


def kept(path: Path, signature: tuple | None, data: datasets.Dataset) -> datasets.Dataset:
    """``data``, the intact set at ``path`` whose files have ``signature``, in torch format
    (a format is a copy of the set and a hash of its state: made once), kept for this process
    (``_VERIFIED``)."""
    data = data.with_format("torch")
    if signature is not None:
        _VERIFIED[path] = (signature, data)
        while len(_VERIFIED) > VERIFIED_KEPT:
            _VERIFIED.popitem(last=False)
    return data


def files_signature(path: Path) -> tuple | None:
    """What changes when a set directory's files do: each file's name, inode, size and
    modification time (a rebuilt set is renamed into place, with new inodes); None when the
    directory is absent."""
    try:
        entries = list(os.scandir(path))
    except (FileNotFoundError, NotADirectoryError):
        return None
    stats = [(e.name, e.stat()) for e in entries]
    return tuple(sorted((name, st.st_ino, st.st_size, st.st_mtime_ns) for name, st in stats))


def mismatch(manifest: dict[str, Any], data: datasets.Dataset, key: str, n: int) -> str:
    """What is wrong with a set read from disk, or "" when it agrees with its manifest."""
    if manifest.get("key") != key:
        return f"its manifest's key is {manifest.get('key')}, not {key}"
    if len(data) != manifest.get("rows") or not 0 < len(data) <= n:
        return f"it has {len(data)} rows and its manifest says {manifest.get('rows')} (of {n})"
    if manifest.get("sha256") != checksum(data):
        return "its contents do not match the manifest's checksum"
    return ""


def write_set(data: datasets.Dataset, path: Path, key: str, spec: dict[str, Any]):
    """Save ``data`` and its manifest to a temporary directory, then rename it to ``path``
    (replacing a corrupt set there); call with the set's lock held."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    data.save_to_disk(str(tmp))
    manifest = {"key": key, "rows": len(data), "sha256": checksum(data), "spec": spec}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2))
    if path.exists():
        corrupt = path.with_name(f".{path.name}.corrupt-{uuid.uuid4().hex[:8]}")
        os.replace(path, corrupt)
        shutil.rmtree(corrupt, ignore_errors=True)
    os.replace(tmp, path)
    return kept(path, files_signature(path), datasets.load_from_disk(str(path)))
