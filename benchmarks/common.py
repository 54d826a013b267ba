"""What the sections share: the setup of the run (the model shape, the copy task and its
batches, from the command line's ``--quick`` and ``--rounds``), pelab's own config and training
step (``pelab_config``, ``PelabStep``: what every section that times pelab runs) and the mean
wall time of one call (sections data and greedy)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import DictConfig
from torch import Tensor

from pelab.assembly import build_members, build_task, data_module
from pelab.data.datamodule import TrainBatches
from pelab.members import member_configs
from pelab.tasks.base import Task

REPOSITORY = Path(__file__).resolve().parents[1]


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
    overrides: list[str]  # pelab's config of this shape and task (``pelab_config``)

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
    overrides = [
        *shape_overrides(shape["d"], shape["layers"], shape["batch"], shape["heads"]),
        f"task.train_lengths=[{n},{n}]",
        f"task.eval_lengths=[{n}]",
    ]
    cfg = pelab_config(*overrides)
    task = build_task(cfg)
    return Setup(
        quick=quick,
        shape=shape,
        task=task,
        # the batches pelab's run of seed 0 trains on, for the hand-written loops
        batches=TrainBatches(task, shape["batch"], steps, 0, cfg.data.length_sampling),
        window=window,
        warmup=warmup,
        steps=steps,
        rounds=rounds or (1 if quick else 4),
        tokens=shape["batch"] * (2 * n + 1),
        tmp=Path(".cache/benchmark"),
        overrides=overrides,
    )


def shape_overrides(d_model: int, layers: int, batch: int, heads: int = 4) -> list[str]:
    """pelab's decoder of this size (4 heads, as the benchmark's figures were measured with) on
    copy."""
    return [
        "task=copy",
        f"model.net.d_model={d_model}",
        f"model.net.n_heads={heads}",
        f"model.net.n_layers={layers}",
        f"data.batch_size={batch}",
    ]


def pelab_config(*overrides: str) -> DictConfig:
    """``configs/train.yaml`` with ``overrides``, as ``scripts/train.py`` composes it, with
    nothing logged and its run directory in ``.cache/benchmark``."""
    scratch = REPOSITORY / ".cache" / "benchmark"
    paths = [f"paths.root_dir='{REPOSITORY}'", f"paths.output_dir='{scratch / 'run'}'"]
    with initialize_config_dir(config_dir=str(REPOSITORY / "configs"), version_base="1.3"):
        return compose("train", overrides=[*paths, "logger=none", *overrides])


class PelabStep:
    """pelab's own training step of the members ``cfg`` asks for (``seeds=[...]``: a stack), as
    its Trainer takes it: the ``SequenceModel`` of ``pelab.assembly``, its ``training_step``
    (in the precision's context), backward, its ``configure_gradient_clipping`` at
    ``trainer.gradient_clip_val``, its ``optimizer_step`` with the optimizer of its
    ``configure_optimizers``, and the schedule's step. ``batch(i)``: step ``i``'s batch of every
    member, as the run draws it. The trainer of ``cfg.trainer`` is attached, never fitted."""

    def __init__(self, cfg: DictConfig, task: Task | None = None) -> None:
        task = task or build_task(cfg)
        self.model = build_members(member_configs(cfg), task)
        self.batches = data_module(cfg, task, [m.seed for m in self.model.members]).train_batches()
        rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
        level = rank_zero.level
        rank_zero.setLevel(logging.WARNING)  # not its lines on the devices, for every model
        try:
            self.trainer = instantiate(
                cfg.trainer, logger=False, callbacks=[], enable_progress_bar=False
            )
        finally:
            rank_zero.setLevel(level)
        self.model.trainer = self.trainer  # what the optimizers and the clipping read
        configured = self.model.configure_optimizers()
        self.optimizer = configured["optimizer"]
        self.schedule = configured["lr_scheduler"]["scheduler"]

    def batch(self, i: int) -> Sequence[tuple[Tensor, Tensor]]:
        return self.batches[i]

    def __call__(self, batch: Sequence[tuple[Tensor, Tensor]]) -> None:
        model, optimizer, trainer = self.model, self.optimizer, self.trainer

        def closure() -> Tensor:
            with trainer.precision_plugin.train_step_context():
                loss = model.training_step(batch, 0)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            model.configure_gradient_clipping(
                optimizer, trainer.gradient_clip_val, trainer.gradient_clip_algorithm
            )
            return loss

        model.optimizer_step(0, 0, optimizer, closure)
        self.schedule.step()


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
