"""Section 3 (``--only data``): Data generation: samples/s that every registered task (and declared
variant) generates at lengths 64 and 512, against the samples/s a training step of the default
model consumes at the same length (target: at least 10x, so generation never limits training)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch

from benchmarks.common import PelabStep, Setup, pelab_config, seconds_per_call
from pelab.assembly import build_task
from pelab.tasks import TASK_REGISTRY

DATA_LENGTHS = (64, 512)
QUICK_DATA_LENGTHS = (16,)  # a smoke run: short sequences, the training step not timed
MAX_STEP_TOKENS = 4096  # longer sequences: generation is timed, the training step is not


def generation_vs_training(
    name: str, variant: dict, length: int, quick: bool, scratch: Path
) -> dict:
    """Samples/s that ``task.sample`` generates and that pelab's training step of the default
    model (configs/train.yaml: decoder, RoPE, batch ``data.batch_size``) consumes, at
    ``length``."""
    settings = {**TASK_REGISTRY[name].settings_at(length, scratch), **variant}
    overrides = [
        f"task={name}",
        f"task.train_lengths=[{length},{length}]",
        f"task.eval_lengths=[{length}]",
        *(f"task.{k}={json.dumps(v)}" for k, v in settings.items()),
    ]
    try:
        cfg = pelab_config(*overrides)
        task = build_task(cfg)
    except Exception as error:  # a task that cannot be built at this length is skipped
        return {"note": f"skipped: {type(error).__name__}: {str(error).splitlines()[0]}"}
    batch, generator = cfg.data.batch_size, torch.Generator().manual_seed(0)
    sample_s = seconds_per_call(
        lambda: task.sample(batch, length, generator), 0.02 if quick else 0.3, 3
    )
    tokens = task.prompt_length(length) + task.answer_length(length) + 2
    row = {"tokens": tokens, "generated_per_s": round(batch / sample_s)}
    if tokens > MAX_STEP_TOKENS:
        return {**row, "note": f"training step not timed: {tokens} tokens per sequence"}
    if quick:  # a smoke run: every task builds and generates; the step is the other sections'
        return {**row, "note": "training step not timed (--quick)"}
    try:
        step = PelabStep(cfg, task)
    except Exception as error:
        return {**row, "note": f"no default model: {type(error).__name__}: {error}"}
    samples = [task.sample(batch, length, generator)]
    step_s = seconds_per_call(lambda: step(samples), 0.0, 1 if quick else 2)
    row.update(trained_per_s=round(batch / step_s, 1), ratio=round(step_s / sample_s, 1))
    return row


def data_generation(quick: bool) -> dict[str, dict]:
    """Every registered task and declared variant at lengths 64 and 512 (16 only with
    ``--quick``; a task with a bounded length axis at most at its ``max_length``): generated vs
    consumed samples/s; the target is a ratio >= 10."""
    rows = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name in sorted(TASK_REGISTRY):
            for variant in ({}, *TASK_REGISTRY[name].variants):
                label = " ".join([name, *(f"{k}={v}" for k, v in variant.items())])
                bound = TASK_REGISTRY[name].max_length  # a bounded length axis: its longest
                lengths = QUICK_DATA_LENGTHS if quick else DATA_LENGTHS
                for length in sorted({min(n, bound or n) for n in lengths}):
                    row = generation_vs_training(name, variant, length, quick, Path(scratch))
                    rows[f"{label} @ {length}"] = row
                    print(
                        f"{label:<34}{length:>7}{row.get('generated_per_s', 0):>14,}"
                        f"{row.get('trained_per_s', 0):>12,.1f}{row.get('ratio', 0):>9,.1f}"
                        f"  {row.get('note', '')}",
                        flush=True,
                    )
    return rows


def section(args, setup: Setup) -> dict:
    """``data``: per task, variant and length, samples generated and trained per second."""
    print(
        f"\n{'task (data generation)':<34}{'length':>7}{'generated/s':>14}{'trained/s':>12}"
        f"{'ratio':>9}"
    )
    return {"data": data_generation(setup.quick)}
