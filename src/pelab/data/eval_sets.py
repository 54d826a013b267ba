"""Fixed evaluation sets, built once with the ``datasets`` library and cached on disk.

The cache key hashes everything that changes the data (the task's ``spec``, the split, the
length, the number of samples and the evaluation seed), so runs and sweeps that share a task
share its sets. Sets are written to a temporary directory and renamed into place, so a crashed
or concurrent writer never leaves a half-written set under the final name.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

import datasets
import torch

from pelab.tasks.base import Task

FORMAT_VERSION = 1
datasets.disable_progress_bars()  # sets are small; their progress bars would drown the log


def eval_seed(task: Task, split: str, length: int) -> int:
    """A seed for one (split, length) set, independent of the training seed."""
    text = f"{task.eval_seed}/{split}/{length}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def cache_key(task: Task, split: str, length: int, n: int) -> str:
    spec = {
        **task.spec(),
        "split": split,
        "length": length,
        "n": n,
        "eval_seed": task.eval_seed,
        "format": FORMAT_VERSION,
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def build_eval_set(task: Task, split: str, length: int, n: int) -> datasets.Dataset:
    generator = torch.Generator().manual_seed(eval_seed(task, split, length))
    prompt, answer = task.sample(n, length, generator)
    return datasets.Dataset.from_dict({"prompt": prompt.tolist(), "answer": answer.tolist()})


def load_eval_set(
    task: Task, split: str, length: int, n: int, cache_dir: str | Path | None
) -> datasets.Dataset:
    """The ``split`` set of ``n`` samples at ``length``, from the cache when present.

    Returned in torch format: items are ``{"prompt": [n_p], "answer": [m]}`` long tensors.
    """
    if cache_dir is None:
        return build_eval_set(task, split, length, n).with_format("torch")
    name = f"{task.task_name}-{split}-len{length}-n{n}-{cache_key(task, split, length, n)}"
    path = Path(cache_dir) / name
    if not path.exists():
        tmp = path.with_name(f".{name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        build_eval_set(task, split, length, n).save_to_disk(str(tmp))
        try:
            os.replace(tmp, path)
        except OSError:  # another job renamed its identical copy first
            shutil.rmtree(tmp, ignore_errors=True)
    return datasets.load_from_disk(str(path)).with_format("torch")
