"""Section 8 (``--only operations``): how many operations a stack launches. On a GPU a small
model is launch-bound (each aten operation but a view launches a kernel, a few microseconds
whatever its size), so a stack of K members costs about what it launches. Counted on the CPU
with a dispatch mode (``CountOperations``): the aten operations of the training steps and the
validation of ``experiment=ablation_cpu`` on copy (``STEPS`` steps, one validation; AdamW with
``foreach``, its GPU default), at K = 8 members over K = 1, for every encoding of the grid
(``--quick``: ``QUICK``, 4 steps); ``launches`` leaves out the views. Goal (issue 43):
at most ``GOAL`` (1.25x) launches for each."""

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
from pelab.train import train

STEPS = 40
GOAL = 1.25
# --quick: RoPE (no parameters: the stacked layers alone), T5 (parameters, a memoised bias) and
# PaTH (parameters and a loop over positions), over 4 steps (``tests/test_operations.py``)
QUICK = ("rope", "t5_bias", "path")
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
    ``ablation_cpu`` model on copy, ``steps`` steps, one validation at the last, no stop, no
    final test)."""
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
        "data.eval_batch_size=32",  # one validation batch, as at 256; the memory check measures 32
        "test=false",  # the count ends with training (CountOperations.last)
        "logger=none",
        "trainer.enable_progress_bar=false",
        "+model.optimizer.foreach=true",  # AdamW's default on a GPU (a CPU loops over tensors)
        COUNTER,
        *extra,
    ]
    CountOperations.last = None
    cfg = compose_run(overrides, root / f"{pe}_{members}")
    with contextlib.redirect_stdout(io.StringIO()):
        train(cfg)
    if CountOperations.last is None:
        raise RuntimeError(f"{pe}: the run of {members} members did not train")
    return CountOperations.last.mode.ops


def operation_ratios(
    encodings: list[str], members: int = 8, steps: int = STEPS
) -> dict[str, dict[str, float]]:
    """For each encoding: its aten operations and its kernel launches (``launches``) at K = 1
    and K = ``members``, and their ratios."""
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for pe in encodings:
            one, many = (count_operations(pe, k, Path(scratch), steps) for k in (1, members))
            results[pe] = {
                "operations_ratio": round(sum(many.values()) / sum(one.values()), 3),
                "launches_k1": launches(one),
                f"launches_k{members}": launches(many),
                "launches_ratio": round(launches(many) / launches(one), 3),
            }
    return results


def section(args, setup) -> dict:
    encodings = list(QUICK) if setup.quick else grid_encodings()
    steps = 4 if setup.quick else STEPS
    print(f"\n{'operations':<20}{'ops ratio':>10}{'K = 1':>9}{'K = 8':>9}{'launches':>10}")
    results = operation_ratios(encodings, steps=steps)
    for pe, r in results.items():
        print(
            f"{pe:<20}{r['operations_ratio']:>10.2f}{r['launches_k1']:>9}{r['launches_k8']:>9}"
            f"{r['launches_ratio']:>10.2f}" + ("" if r["launches_ratio"] <= GOAL else "  > goal")
        )
    return {"operations": results}
