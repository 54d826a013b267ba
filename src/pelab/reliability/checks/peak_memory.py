"""The peak bytes a model's tensors hold at once, counted as the operations run
(``LiveTensorBytes``): during one evaluation forward pass (``forward_peak``) or one training step
(``train_step_peak``), at the trainer's precision (``autocast``) on any device;
``pelab.reliability.checks.memory`` decides from them whether a run fits."""

from __future__ import annotations

import weakref
from contextlib import AbstractContextManager, nullcontext

import torch
from omegaconf import DictConfig
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

DOUBLE = ("64-true", "64")  # trainer.precision values of float64: twice the float32 measured


def precision_of(cfg: DictConfig) -> str:
    """``trainer.precision`` as Lightning names it (32-true, bf16-mixed, ...)."""
    return str(cfg.trainer.get("precision", "32-true"))


def autocast(precision: str, device: str) -> AbstractContextManager:
    """A ``trainer.precision`` of mixed precision (bf16-mixed, 16-mixed) as Lightning runs the
    steps: autocast on ``device``; none for the others, which run the weights' float32 (a
    ``*-true`` half precision holds less; ``64-true``: twice as much, ``DOUBLE``)."""
    if precision in ("bf16-mixed", "bf16", "16-mixed", "16"):
        dtype = torch.bfloat16 if precision.startswith("bf16") else torch.float16
        return torch.autocast(device, dtype=dtype)
    return nullcontext()


class LiveTensorBytes(TorchDispatchMode):
    """While active, counts the bytes of the tensors that operations create, from creation until
    the last tensor on their storage is freed; ``peak`` is the most alive at once. Storages that
    existed before (``known``: weights, inputs) are not counted. The same on every device; the
    allocator's own slack is not included."""

    def __init__(self, known: list[torch.Tensor]) -> None:
        super().__init__()
        self.known = {t.untyped_storage().data_ptr() for t in known}
        self.refs: dict[int, int] = {}  # storage address -> tensors alive on it
        self.live = self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor):
                self._track(tensor)
        return out

    def _track(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        key, nbytes = storage.data_ptr(), storage.nbytes()
        if key in self.known or nbytes == 0:
            return
        if key not in self.refs:
            self.live += nbytes
            self.peak = max(self.peak, self.live)
        self.refs[key] = self.refs.get(key, 0) + 1
        weakref.finalize(tensor, self._release, key, nbytes)

    def _release(self, key: int, nbytes: int) -> None:
        self.refs[key] -= 1
        if not self.refs[key]:
            del self.refs[key]
            self.live -= nbytes


def forward_peak(
    model, task, batch: int, device: str, length: int | None = None, precision: str = "32-true"
) -> int:
    """Peak bytes of the tensors alive during one no-grad forward pass of ``model``'s first member
    over ``batch`` sequences at ``length`` (default: the longest evaluation length; the full
    sequence ``BOS prompt SEP answer``) at ``trainer.precision`` ``precision``. Evaluation folds
    the members' batches into one, so a stack of K members needs what one member needs for K
    times the batch."""
    generator = torch.Generator().manual_seed(0)  # the run's own RNG stays untouched
    prompt, answer = task.sample(batch, length or max(task.eval_lengths), generator)
    prompt, answer = prompt.to(device), answer.to(device)
    positions = model.sequence_positions(prompt, answer.shape[1], generator)
    known = [*model.parameters(), *model.buffers(), prompt, answer]
    known += [positions] if positions is not None else []
    training = model.training
    model.eval()  # as in evaluation: no dropout, so the run's RNG is not drawn from
    try:
        with (
            torch.no_grad(),
            model.selected([0]),
            autocast(precision, device),
            LiveTensorBytes(known) as counter,
        ):
            model.kind.answer_logits(model.net, prompt, answer, positions)
    finally:
        model.train(training)
    return counter.peak * (2 if precision in DOUBLE else 1)


def train_step_peak(cfg: DictConfig, task, model, device: str) -> tuple[int, int]:
    """Peak bytes of the tensors alive during one training step of ``model`` (built to be
    measured: the step changes its weights and draws from the RNG): forward and backward of each
    member's ``data.batch_size`` sequences at the longest training length, at the trainer's
    precision, then the optimizer's step; and the bytes of the optimizer's state after it."""
    members, precision = len(model.members), precision_of(cfg)
    generator = torch.Generator().manual_seed(0)
    prompt, answer = task.sample(members * cfg.data.batch_size, task.train_lengths[1], generator)
    prompt, answer = prompt.to(device), answer.to(device)
    positions = model.sequence_positions(prompt, answer.shape[1], generator)
    weights = list(model.parameters())
    known = [*weights, *model.buffers(), prompt, answer]
    known += [positions] if positions is not None else []
    optimizer = model.optimization.factory(weights)
    with LiveTensorBytes(known) as counter:
        with autocast(precision, device):
            loss = model.loss(prompt, answer, positions, members).sum()
        loss.backward()
        optimizer.step()
    state = sum(
        t.untyped_storage().nbytes()
        for values in optimizer.state.values()
        for t in values.values()
        if isinstance(t, torch.Tensor)
    )
    factor = 2 if precision in DOUBLE else 1
    return counter.peak * factor, state * factor
