"""Whether evaluation at the longest configured length fits in memory, said before training.

The peak of evaluation is one forward pass, without gradients, over a batch of
``data.eval_batch_size`` sequences at the longest evaluation length (greedy decoding feeds at
most that many tokens at once). It is measured, not guessed: the run's own model runs that
forward pass once before training while ``LiveTensorBytes`` counts the bytes of the tensors it
holds at once (``MARGIN`` covers the allocator's slack). When even a generous bound of that pass
(``BOUND_COPIES`` tensors of ``[b, heads, n, n]``) does not fit in free memory, it is measured
with 1 and 2 sequences instead and extrapolated linearly to the batch. When the logits alone
cannot fit, the run is refused unmeasured; on the CPU, a pass that might exhaust the RAM is
measured at three shorter lengths instead and extrapolated (``longer_need``).
"""

from __future__ import annotations

import logging
import math
import os
import weakref
from pathlib import Path

import torch
from omegaconf import DictConfig
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from pelab.errors import ConfigError

log = logging.getLogger(__name__)

GIB = 2**30
BOUND_COPIES = 32  # [b, h, n, n] tensors alive at once; CoPE, the most measured, holds about 11
MARGIN = 1.25  # on a measured need: the allocator's slack, an extrapolation up to 12% short


def available_bytes(device: str) -> int | None:
    """Memory free for this run: the GPU's free memory, or the machine's available RAM."""
    if device == "cuda":
        return torch.cuda.mem_get_info()[0] if torch.cuda.is_available() else None
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


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


def forward_peak(model, task, batch: int, device: str, length: int | None = None) -> int:
    """Peak bytes of the tensors alive during one no-grad forward pass of ``model``'s first member
    over ``batch`` sequences at ``length`` (default: the longest evaluation length; the full
    sequence ``BOS prompt SEP answer``). Evaluation folds the members' batches into one, so a
    stack of K members needs what one member needs for K times the batch."""
    generator = torch.Generator().manual_seed(0)  # the run's own RNG stays untouched
    prompt, answer = task.sample(batch, length or max(task.eval_lengths), generator)
    prompt, answer = prompt.to(device), answer.to(device)
    positions = model.sequence_positions(prompt, answer.shape[1], generator)
    known = [*model.parameters(), *model.buffers(), prompt, answer]
    known += [positions] if positions is not None else []
    training = model.training
    model.eval()  # as in evaluation: no dropout, so the run's RNG is not drawn from
    try:
        with torch.no_grad(), model.selected([0]), LiveTensorBytes(known) as counter:
            model.kind.answer_logits(model.net, prompt, answer, positions)
    finally:
        model.train(training)
    return counter.peak


def bound_bytes(cfg: DictConfig, n: int, batch: int) -> int:
    """A generous upper bound of one forward pass: ``BOUND_COPIES`` attention-sized tensors."""
    size = cfg.model.net
    d_ff = size.get("d_ff") or 4 * size.d_model
    return 4 * batch * (BOUND_COPIES * size.n_heads * n * n + n * (6 * size.d_model + d_ff))


def floor_bytes(cfg: DictConfig, task, n: int, batch: int) -> int:
    """What one forward pass certainly holds at once: the last hidden states and the logits."""
    return 4 * batch * n * (cfg.model.net.d_model + task.vocab_size)


def eval_need(cfg: DictConfig, task, model, device: str) -> int:
    """The bytes evaluating the longest length needs: measured at the configured batch when
    that is safe, else extrapolated from 1 and 2 sequences."""
    n, batch = task.max_sequence_length(), cfg.data.eval_batch_size * len(model.seeds)
    free = available_bytes(device)
    if free is None or bound_bytes(cfg, n, batch) <= free:
        return int(MARGIN * forward_peak(model, task, batch, device))
    forward_peak(model, task, 1, device)  # fill the encodings' caches (cos/sin tables, ...)
    one, two = forward_peak(model, task, 1, device), forward_peak(model, task, 2, device)
    return int(MARGIN * (one + max(two - one, 1) * (batch - 1)))


def longer_need(cfg: DictConfig, task, model, free: int) -> int:
    """The bytes evaluating the longest length needs, when measuring it could exhaust the RAM:
    one sequence measured at three shorter lengths ``L/4, L/2, L`` (``L``: the longest whose
    bound fits in a quarter of ``free``), the quadratic through them (attention grows at most
    with the square of the length) evaluated at the longest length, times the batch."""
    longest, batch = max(task.eval_lengths), cfg.data.eval_batch_size * len(model.seeds)
    top = 4
    while top * 2 < longest and bound_bytes(cfg, tokens(task, top * 2), 2) <= free // 4:
        top *= 2
    lengths = (top // 4, top // 2, top)
    forward_peak(model, task, 1, "cpu", lengths[0])  # fill the encodings' caches
    peaks = [forward_peak(model, task, 1, "cpu", n) for n in lengths]
    at_longest = sum(  # Lagrange's form of the quadratic through (lengths, peaks)
        peak * math.prod((longest - other) / (n - other) for other in lengths if other != n)
        for n, peak in zip(lengths, peaks, strict=True)
    )
    return int(MARGIN * batch * max(at_longest, peaks[-1]))


def tokens(task, length: int) -> int:
    """The full sequence's tokens at ``length``: ``BOS prompt SEP answer``."""
    prompt, answer = task.sample(1, length, torch.Generator().manual_seed(0))
    return prompt.shape[1] + answer.shape[1] + 2


def check_eval_memory(cfg: DictConfig, task, model) -> int | None:
    """The measured peak bytes of evaluating the longest length with ``data.eval_batch_size``
    sequences (None: the free memory is unknown); a ``ConfigError`` before training when it
    exceeds the device's free memory, naming the length and the largest batch that fits."""
    accelerator = str(cfg.trainer.get("accelerator", "cpu"))
    device = "cuda" if accelerator in ("gpu", "cuda") and torch.cuda.is_available() else "cpu"
    free = available_bytes(device)
    if free is None:
        return None
    n, batch = task.max_sequence_length(), cfg.data.eval_batch_size
    where = f"evaluating length {max(task.eval_lengths)} ({n} tokens)"
    advice = "or drop the longest lengths from task.eval_lengths"
    if floor_bytes(cfg, task, n, batch) > free:
        raise ConfigError(
            f"{where} with data.eval_batch_size={batch} needs at least "
            f"{floor_bytes(cfg, task, n, batch) / GIB:.1f} GiB for the logits alone, but only "
            f"{free / GIB:.1f} GiB is free on the {device}; lower data.eval_batch_size, {advice}"
        )
    how = "measured"
    model.to(device)
    try:
        if device == "cpu" and bound_bytes(cfg, n, 2) > free:  # measuring could exhaust the RAM
            need, how = longer_need(cfg, task, model, free), "extrapolated from shorter lengths"
        else:
            need = eval_need(cfg, task, model, device)
    except torch.cuda.OutOfMemoryError:
        raise ConfigError(
            f"{where} does not fit: measuring it exhausted the {free / GIB:.1f} GiB free on the "
            f"GPU; lower data.eval_batch_size, {advice}"
        ) from None
    except (ConfigError, KeyError, ValueError) as error:  # no shorter lengths to sample
        log.warning(
            "%s: too long to measure safely, and the task gives no shorter lengths to "
            "extrapolate from (%s); not checked",
            where,
            error,
        )
        return None
    log.info("%s needs about %.2f GiB (%s)", where, need / GIB, how)
    if need > free:
        fits = free // max(1, need // batch)
        remedy = (
            f"lower data.eval_batch_size to about {fits}, {advice}"
            if fits >= 1
            else "not even one sequence fits: drop the longest lengths from task.eval_lengths"
        )
        raise ConfigError(
            f"{where} with data.eval_batch_size={batch} needs about {need / GIB:.1f} GiB "
            f"({how}), but only {free / GIB:.1f} GiB is free on the {device}; {remedy}"
        )
    return need
