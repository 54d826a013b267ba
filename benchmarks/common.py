"""What the sections share: the setup of the run (the model shape, the copy task and its
batches, from the command line's ``--quick`` and ``--rounds``) and the mean wall time of one
call (sections data and greedy)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch

from pelab.data.datamodule import TrainBatches
from pelab.tasks import TASK_REGISTRY
from pelab.tasks.base import Task


@dataclass
class Setup:
    """The model shape and copy batches that sections 1 and 2 train on, and the timing windows:
    ``steps = window * (windows + warmup) + 1`` steps, ``rounds`` alternating rounds per side."""

    quick: bool
    shape: dict
    task: Task
    batches: TrainBatches
    window: int
    warmup: int
    steps: int
    rounds: int
    tokens: int  # per step
    tmp: Path  # scratch files (.cache/benchmark)

    @property
    def vocab(self) -> int:
        return self.task.vocab_size


def make_setup(quick: bool, rounds: int | None) -> Setup:
    """Full: 4 layers, d_model 128, 63 tokens, batch 64, 4 rounds; quick: a smoke run."""
    torch.set_float32_matmul_precision("high")
    shape = dict(d=128, heads=4, layers=4, batch=64, length=31)  # 1 + 31 + 1 + 31 - 1 = 63 tokens
    if quick:
        shape.update(d=32, layers=1, batch=16)
    window, windows, warmup = (5, 4, 1) if quick else (20, 4, 1)
    steps = window * (windows + warmup) + 1
    n = shape["length"]
    task = TASK_REGISTRY["copy"](train_lengths=[n, n], eval_lengths=[n])
    return Setup(
        quick=quick,
        shape=shape,
        task=task,
        batches=TrainBatches(task, shape["batch"], steps, 0),
        window=window,
        warmup=warmup,
        steps=steps,
        rounds=rounds or (1 if quick else 4),
        tokens=shape["batch"] * (2 * n + 1),
        tmp=Path(".cache/benchmark"),
    )


def seconds_per_call(fn, min_seconds: float, min_calls: int) -> float:
    """Mean wall time of ``fn()`` after one warm-up call, over at least ``min_calls`` calls and
    ``min_seconds`` seconds."""
    fn()
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if calls >= min_calls and elapsed >= min_seconds:
            return elapsed / calls
