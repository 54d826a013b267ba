"""Section ``--only operations``: how many operations a stack launches. On a GPU a small model is
launch-bound (each aten operation is at least one kernel launch, a few microseconds, whatever
its size), so a stack of K members costs about what it launches. Counted on the CPU with a
dispatch mode (``CountOperations``): the aten operations of a training run of
``experiment=ablation_cpu`` on copy, ``STEPS`` steps with one validation, at K = 8 members over
K = 1, for every encoding of the grid. Goal (issue 43): at most ``GOAL`` (1.25x) for each; the
training step is what K multiplies, so the ratio is that of the work K adds per launch."""

from __future__ import annotations

import contextlib
import io
import tempfile
from collections import Counter
from pathlib import Path
from typing import ClassVar

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.gpu_check import compose_run, grid_encodings
from pelab.train import run

STEPS = 40
GOAL = 1.25
COUNTER = "+callbacks.operations._target_=benchmarks.operations.CountOperations"


class _Count(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))


# operations that only relabel memory (a view, ``matmul``'s reshape): no kernel on a GPU
METADATA = {str(torch.ops.aten._unsafe_view.default)}


def launches(ops: Counter[str]) -> int:
    """The operations of ``ops`` that launch a kernel on a GPU: all but views."""
    return sum(n for op, n in ops.items() if not _is_view(op))


def _is_view(op: str) -> bool:
    if op in METADATA:
        return True
    namespace, name, overload = op.split(".")
    return getattr(getattr(getattr(torch.ops, namespace), name), overload).is_view


class CountOperations(Callback):
    """Counts the aten operations of each training step (forward, backward, clipping, the
    optimizer and the members' step scaling) and each validation batch: from a batch's start to
    its end, so what makes the batches (the task's sampler, on the host) is not counted. The
    last to finish is ``CountOperations.last``."""

    last: ClassVar[CountOperations | None] = None

    def __init__(self) -> None:
        self.mode = _Count()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.mode.__enter__()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.mode.__exit__(None, None, None)

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self.mode.__enter__()

    def on_validation_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0
    ) -> None:
        self.mode.__exit__(None, None, None)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        CountOperations.last = self


def count_operations(
    pe: str, members: int, root: Path, steps: int = STEPS, *extra: str
) -> Counter:
    """The aten operations, by name, of ``pe``'s training run of ``members`` seeds (the
    ``ablation_cpu`` model on copy, ``steps`` steps, one validation at the last, no stop)."""
    seeds = ",".join(map(str, range(members)))
    overrides = [
        "experiment=ablation_cpu",
        f"pe={pe}",
        "task=copy",
        f"seeds=[{seeds}]",
        f"trainer.max_steps={steps}",
        f"trainer.val_check_interval={steps}",
        "learned_at=null",
        "task.eval_lengths=[8]",
        "task.n_val=32",
        "task.n_test=8",
        "logger=none",
        "trainer.enable_progress_bar=false",
        "+model.optimizer.foreach=true",  # AdamW's default on a GPU (a CPU loops over tensors)
        COUNTER,
        *extra,
    ]
    CountOperations.last = None
    cfg = compose_run(overrides, root / f"{pe}_{members}")
    with contextlib.redirect_stdout(io.StringIO()):
        run(cfg)
    if CountOperations.last is None:
        raise RuntimeError(f"{pe}: the run of {members} members did not train")
    return CountOperations.last.mode.ops


def operation_ratios(encodings: list[str], members: int = 8) -> dict[str, dict]:
    """For each encoding: its operations at K = ``members`` and K = 1, and their ratio."""
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for pe in encodings:
            one = sum(count_operations(pe, 1, Path(scratch)).values())
            many = sum(count_operations(pe, members, Path(scratch)).values())
            results[pe] = {"k1": one, f"k{members}": many, "ratio": round(many / one, 3)}
            print(f"{pe:<20}{one:>10}{many:>10}{many / one:>8.2f}", flush=True)
    return results


def section(args, setup) -> dict:
    encodings = ["rope", "t5_bias"] if setup.quick else grid_encodings()
    print(f"\n{'operations':<20}{'K = 1':>10}{'K = 8':>10}{'ratio':>8}   (goal <= {GOAL})")
    return {"operations": operation_ratios(encodings)}
