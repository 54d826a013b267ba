"""Whether evaluation at the longest configured length fits in memory, said before training.

The peak of evaluation is one forward pass, without gradients, over a batch of
``data.eval_batch_size`` sequences at the longest evaluation length (greedy decoding feeds at most
that many tokens at once). It is measured, not guessed: the run's own model runs that forward pass
once before training while ``peak_memory.LiveTensorBytes`` counts the bytes of the tensors it holds
at once (``MARGIN`` covers the allocator's slack). When even a generous bound of that pass
(``BOUND_COPIES`` tensors of ``[b, heads, n, n]``) does not fit in free memory, it is measured with
1 and 2 sequences instead and extrapolated linearly to the batch. When the logits alone cannot fit,
the run is refused unmeasured; on the CPU, a pass that might exhaust the RAM is measured at three
shorter lengths instead and extrapolated (``longer_need``). The pass runs under the trainer's mixed
precision (``peak_memory.autocast``), as evaluation does.

On the CPU the count is what the tensors hold: with glibc's mmap threshold fixed, the process's
peak resident memory agrees with it within 1% (``test_memory.py``). glibc's default threshold rises
to the largest block freed (up to 32 MiB), and blocks below it come from its heap, whose holes stay
resident: passes of tensors under 32 MiB each held up to 1.4-2.6x the count, varying from run to
run (6-130 MiB counted), passes of larger tensors up to 1.03-1.10x (350-410 MiB), which ``MARGIN``
covers (RoPE and Shaw encoders, 2-core Intel Xeon, glibc 2.36, 2026-11-27). A CPU need of gigabytes
held in tensors under 32 MiB each would be underestimated up to about 2x.

``peak_memory.train_step_peak`` and ``measured_need`` measure what one job of a parallel sweep
holds at its peak, training included (``pelab.sizing.job_need``, which builds the job's model),
which ``hydra/launcher=parallel`` divides a GPU's free memory by.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import torch
from omegaconf import DictConfig

from pelab.errors import ConfigError
from pelab.reliability.checks.peak_memory import forward_peak, precision_of
from pelab.reliability.cluster.slurm import GPU_ACCELERATORS

log = logging.getLogger(__name__)

GIB = 2**30
BOUND_COPIES = 32  # [b, h, n, n] tensors alive at once; CoPE, the most measured, holds about 11
MARGIN = 1.25  # on a measured need: the allocator's slack, an extrapolation up to 12% short


def available_bytes(device: str) -> int | None:
    """Memory free for this run. On the GPU, what this process's caching allocator can still hand
    out: the device's free memory and the blocks it reserved but does not use, within its
    per-process memory fraction (a parallel sweep's job: its share; ``gpu_fraction``). On the
    CPU, the machine's available RAM."""
    if device == "cuda":
        if not torch.cuda.is_available():
            return None
        free, total = torch.cuda.mem_get_info()
        allocated = torch.cuda.memory_allocated()
        cached = torch.cuda.memory_reserved() - allocated
        return int(min(free + cached, gpu_fraction() * total - allocated))
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def gpu_fraction() -> float:
    """The share of the GPU's memory this process's allocator may hold
    (``torch.cuda.set_per_process_memory_fraction``; 1 unless set; torch < 2.6 cannot say: 1)."""
    getter = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    return 1.0 if getter is None else float(getter())


def run_device(cfg: DictConfig) -> str:
    """Where the run's trainer computes: ``cuda`` for ``trainer.accelerator`` gpu, cuda or auto
    when CUDA is available, else ``cpu``."""
    accelerator = str(cfg.trainer.get("accelerator", "cpu"))
    gpu = accelerator in (*GPU_ACCELERATORS, "auto") and torch.cuda.is_available()
    return "cuda" if gpu else "cpu"


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
    n, batch = task.max_sequence_length(), cfg.data.eval_batch_size * len(model.members)
    free, precision = available_bytes(device), precision_of(cfg)
    if free is None or bound_bytes(cfg, n, batch) <= free:
        return int(MARGIN * forward_peak(model, task, batch, device, precision=precision))
    forward_peak(model, task, 1, device)  # fill the encodings' caches (cos/sin tables, ...)
    one, two = (forward_peak(model, task, b, device, precision=precision) for b in (1, 2))
    return int(MARGIN * (one + max(two - one, 1) * (batch - 1)))


def longer_need(cfg: DictConfig, task, model, free: int) -> int:
    """The bytes evaluating the longest length needs, when measuring it could exhaust the RAM:
    one sequence measured at three shorter lengths ``L/4, L/2, L`` (``L``: the longest whose
    bound fits in a quarter of ``free``), the quadratic through them (attention grows at most
    with the square of the length) evaluated at the longest length, times the batch."""
    longest, batch = max(task.eval_lengths), cfg.data.eval_batch_size * len(model.members)
    top = 4
    while top * 2 < longest and bound_bytes(cfg, tokens(task, top * 2), 2) <= free // 4:
        top *= 2
    lengths = (top // 4, top // 2, top)
    forward_peak(model, task, 1, "cpu", lengths[0])  # fill the encodings' caches
    peaks = [forward_peak(model, task, 1, "cpu", n, precision_of(cfg)) for n in lengths]
    at_longest = sum(  # Lagrange's form of the quadratic through (lengths, peaks)
        peak * math.prod((longest - other) / (n - other) for other in lengths if other != n)
        for n, peak in zip(lengths, peaks, strict=True)
    )
    return int(MARGIN * batch * max(at_longest, peaks[-1]))


def tokens(task, length: int) -> int:
    """The full sequence's tokens at ``length``: ``BOS prompt SEP answer``."""
    prompt, answer = task.sample(1, length, torch.Generator().manual_seed(0))
    return prompt.shape[1] + answer.shape[1] + 2


def measured_need(cfg: DictConfig, task, model, device: str, free: int | None) -> tuple[int, str]:
    """The bytes evaluating the longest length needs on ``device`` (``model`` is there), and how
    they were found; on the CPU, from shorter lengths when measuring could exhaust the RAM."""
    n = task.max_sequence_length()
    if device == "cpu" and free is not None and bound_bytes(cfg, n, 2) > free:
        return longer_need(cfg, task, model, free), "extrapolated from shorter lengths"
    return eval_need(cfg, task, model, device), "measured"


def check_eval_memory(cfg: DictConfig, task, model) -> int | None:
    """The measured peak bytes of evaluating the longest length with ``data.eval_batch_size``
    sequences (None: the free memory is unknown); a ``ConfigError`` before training when it
    exceeds the memory free to this process beside its weights (a parallel sweep's job on a GPU:
    its share), naming the length and the largest batch that fits."""
    device = run_device(cfg)
    model.to(device)
    free = available_bytes(device)
    if free is None:
        return None
    n, batch = task.max_sequence_length(), cfg.data.eval_batch_size
    where = f"evaluating length {max(task.eval_lengths)} ({n} tokens)"
    advice = "or drop the longest lengths from task.eval_lengths"
    place = f"on the {device}"
    if device == "cuda" and gpu_fraction() < 1:
        place = f"in this job's share of the GPU ({gpu_fraction():.0%}: hydra.launcher.n_jobs)"
        advice = f"lower hydra.launcher.n_jobs, {advice}"
    if floor_bytes(cfg, task, n, batch) > free:
        raise ConfigError(
            f"{where} with data.eval_batch_size={batch} needs at least "
            f"{floor_bytes(cfg, task, n, batch) / GIB:.1f} GiB for the logits alone, but only "
            f"{free / GIB:.1f} GiB is free {place}; lower data.eval_batch_size, {advice}"
        )
    try:
        need, how = measured_need(cfg, task, model, device, free)
    except torch.cuda.OutOfMemoryError:
        raise ConfigError(
            f"{where} does not fit: measuring it exhausted the {free / GIB:.1f} GiB free "
            f"{place}; lower data.eval_batch_size, {advice}"
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
            f"({how}), but only {free / GIB:.1f} GiB is free {place}; {remedy}"
        )
    return need
