"""The slow "a small model learns it in distribution" run shared by the task test files (the tiny
run in every layout is the contract test, ``tests/tasks/test_tasks.py``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pelab.train import train
from tests.conftest import compose_config


def learn(
    tmp_path: Path, task: str, steps: int, *overrides: str, pe: str = "rope"
) -> dict[str, Any]:
    """Train the measured model (a decoder, d_model 64, 2 layers, 4 heads, RoPE; ``pe`` and
    ``overrides`` may change it) for ``steps`` steps of 64 samples and return the record, with
    the wall time printed (run with ``-s`` to see it). Each caller's budget and lengths were
    measured to pass with a margin (most on two seeds): tasks that need a pointer by position
    (binary strings, arithmetic) take 4 layers or short lengths to be learnt within a minute or
    two on 2 cores."""
    cfg = compose_config(
        [
            f"task={task}",
            f"pe={pe}",
            "logger=csv",
            f"trainer.max_steps={steps}",
            f"trainer.val_check_interval={steps}",
            "learned_at=null",  # a fixed budget, as each caller measured it
            "data.length_sampling=uniform",  # each length equally often, as measured
            "model.net.n_heads=4",  # as measured (the default is now 8)
            "task.n_val=64",
            "task.n_test=256",
            *overrides,
        ],
        tmp_path,
    )
    start = time.perf_counter()
    [record] = train(cfg)
    seconds = time.perf_counter() - start
    test_id = record["metrics"]["test_id"]
    print(f"\n{task} {overrides}: {steps} steps, {seconds:.0f} s, in-distribution {test_id}")
    return record
