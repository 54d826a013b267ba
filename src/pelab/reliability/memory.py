"""Whether evaluation at the longest configured length fits in memory, said before training.

Evaluation decodes greedily: each step runs the whole model, without gradients, on a batch of
``data.eval_batch_size`` sequences of up to ``n`` tokens (``task.max_sequence_length()``). One
layer's activations are alive at a time, so the peak is about

    4 bytes x (ATTENTION_COPIES x b h n^2  +  b n (5 d + d_ff)  +  b n V)  +  the weights,

the ``[b, h, n, n]`` attention scores dominating at long lengths (the eager path holds logits,
bias, probabilities and a temporary; relative encodings add a few more tensors of that size).
``tests/reliability/test_memory.py`` checks the estimate bounds a measured peak from above.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from omegaconf import DictConfig
from torch import nn

from pelab.pe.base import ConfigError
from pelab.tasks.base import Task

ATTENTION_COPIES = 8  # [b, h, n, n] tensors alive at once, with a margin for relative encodings
GIB = 2**30


def eval_bytes(batch: int, n: int, d_model: int, n_heads: int, d_ff: int, vocab: int) -> int:
    """The estimated peak bytes of one evaluation forward pass (float32), weights excluded."""
    scores = ATTENTION_COPIES * batch * n_heads * n * n
    activations = batch * n * (5 * d_model + d_ff)
    logits = batch * n * vocab
    return 4 * (scores + activations + logits)


def available_bytes(device: str) -> int | None:
    """Memory free for this run: the GPU's free memory, or the machine's available RAM."""
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.mem_get_info()[0]
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_eval_memory(cfg: DictConfig, task: Task, net: nn.Module) -> None:
    """A ``ConfigError`` before training when evaluating the longest length would not fit in the
    memory of the device the run uses; names the length and a batch size that would fit."""
    dims = getattr(net, "dims", None)
    if dims is None:
        return
    d_ff = cfg.model.net.get("d_ff") or 4 * dims.d_model
    n = task.max_sequence_length()
    batch = cfg.data.eval_batch_size
    weights = sum(p.numel() * p.element_size() for p in net.parameters())
    need = eval_bytes(batch, n, dims.d_model, dims.n_heads, d_ff, task.vocab_size) + weights
    accelerator = str(cfg.trainer.get("accelerator", "cpu"))
    device = "cuda" if accelerator in ("gpu", "cuda") else "cpu"
    free = available_bytes(device)
    if free is None or need <= free:
        return
    per_sample = eval_bytes(1, n, dims.d_model, dims.n_heads, d_ff, task.vocab_size)
    fits = max(0, (free - weights) // per_sample)
    raise ConfigError(
        f"evaluating length {max(task.eval_lengths)} ({n} tokens) with "
        f"data.eval_batch_size={batch} needs about {need / GIB:.1f} GiB, but only "
        f"{free / GIB:.1f} GiB is free on the {device}; lower data.eval_batch_size to at most "
        f"{fits}, or drop the longest lengths from task.eval_lengths"
    )
