"""Which attention kernel a run gets, and in which dtype: read from the operations one forward
pass dispatches on the run's device under its precision, not guessed from the settings.

PyTorch's ``scaled_dot_product_attention`` picks its kernel per call (flash, memory-efficient,
cuDNN, or the math fallback on CUDA; a flash kernel on the CPU) from the dtype, the head width,
the mask and the device, so two encodings of one grid can run different kernels in different
dtypes: a run's record says which (``attention``: ``{"kernel": ..., "dtype": ...}``; per layer
kernel when its layers differ, ``docs/performance.md``)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import lightning as L
import torch
from lightning.pytorch import Callback
from torch.utils._python_dispatch import TorchDispatchMode

from pelab.models.attention import Attention

# aten's fused attention operations, by the kernel's name
FUSED_KERNELS = {
    "_scaled_dot_product_flash_attention": "flash",
    "_scaled_dot_product_flash_attention_for_cpu": "flash (cpu)",
    "_scaled_dot_product_efficient_attention": "memory-efficient",
    "_scaled_dot_product_cudnn_attention": "cudnn",
    "_scaled_dot_product_fused_attention_overrideable": "fused (device's own)",
}
PRODUCTS = ("bmm", "mm", "matmul")  # the q.k product of the eager path and the math fallback


class AttentionOps(TorchDispatchMode):
    """While active, the first fused attention operation dispatched and the dtype of its query,
    else the dtype of the first matrix product (an eager or math attention's ``q k^T``)."""

    def __init__(self) -> None:
        super().__init__()
        self.kernel: str | None = None
        self.dtype: torch.dtype | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._overloadpacket.__name__
        if self.kernel is None and name in FUSED_KERNELS:
            self.kernel, self.dtype = FUSED_KERNELS[name], args[0].dtype
        elif self.dtype is None and name in PRODUCTS:
            self.dtype = args[0].dtype
        return func(*args, **(kwargs or {}))


def attention_kernels(model, forward_context: Callable[[], AbstractContextManager]) -> dict:
    """``{"kernel": ..., "dtype": ...}`` of the self-attention of ``model`` (a
    ``SequenceModel``) on its device, from one no-grad forward of its first member over a
    sequence of the longest training length inside ``forward_context`` (the trainer's precision:
    ``trainer.precision_plugin.forward_context``). ``eager`` is pelab's own attention (an encoding
    with a hook the fused kernel has no room for), ``math`` PyTorch's unfused fallback. Layers
    that differ are listed in order (``"flash, memory-efficient"``). The run's RNG, its mode and
    its weights are left as they were."""
    layers = [m for m in model.net.modules() if isinstance(m, Attention)]
    seen: list[tuple[str, str]] = []
    originals = {id(layer): layer.attend for layer in layers}

    def watched(layer: Attention) -> Callable[..., Any]:
        def attend(*args: Any) -> Any:
            with AttentionOps() as ops:
                out = originals[id(layer)](*args)
            fused = originals[id(layer)].__func__ is not Attention.attend_eager
            kernel = ops.kernel or ("math" if fused else "eager")
            seen.append((kernel, str(ops.dtype).removeprefix("torch.")))
            return out

        return attend

    task, device = model.task, next(model.net.parameters()).device
    generator = torch.Generator().manual_seed(0)  # the run's own RNG stays untouched
    prompt, answer = task.sample(1, max(task.train_lengths), generator)
    prompt, answer = prompt.to(device), answer.to(device)
    positions = model.sequence_positions(prompt, answer.shape[1], generator)
    training = model.training
    model.eval()  # no dropout: nothing drawn from the run's RNG
    for layer in layers:
        layer.attend = watched(layer)
    try:
        with torch.no_grad(), model.selected([0]), forward_context():
            model.kind.answer_logits(model.net, prompt, answer, positions)
    finally:
        for layer in layers:  # the bound method the constructor chose
            layer.attend = originals[id(layer)]
        model.train(training)
    kernels = list(dict.fromkeys(kernel for kernel, _ in seen))
    dtypes = list(dict.fromkeys(dtype for _, dtype in seen))
    return {"kernel": ", ".join(kernels), "dtype": ", ".join(dtypes)}


class AttentionKernels(Callback):
    """Reads the run's attention kernels (``attention_kernels``) once its model is on its device:
    at the start of ``fit``, or of ``test`` in a job that only tests; ``found`` holds them."""

    def __init__(self) -> None:
        self.found: dict[str, str] | None = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.found = attention_kernels(pl_module, trainer.precision_plugin.forward_context)

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.found is None:
            self.on_fit_start(trainer, pl_module)
