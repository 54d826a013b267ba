"""Host syncs: the operations that make the host wait for an accelerator.

A GPU runs a training step asynchronously: the host queues kernels and goes on, until an
operation needs a device value on the host (``loss.item()``, ``bool(t.any())``, ``torch.equal``,
a shape that depends on values as ``nonzero``'s does, a copy to the CPU). Each such read stalls
the host until the GPU has finished everything queued, so small models, whose kernels are short,
spend their steps waiting. ``HostSyncs`` counts those operations on any device (on the CPU they
cost nothing, but the same code syncs on a GPU), so a CPU test can pin how many a step makes
(``tests/test_device.py``, ``tests/device.py``) and the GPU check counts them on a GPU
(``benchmarks.gpu_check``, its ``syncs`` row).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import torch
from lightning.pytorch.callbacks import Callback
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakTensorKeyDictionary

aten = torch.ops.aten

# operations whose result the host needs from the device: a value, or a shape that depends on one
HOST_READS = frozenset(
    {
        aten._local_scalar_dense.default,  # .item(), float(t), int(t), bool(t)
        aten.is_nonzero.default,  # if t:
        aten.equal.default,  # torch.equal
        aten.nonzero.default,
        aten.masked_select.default,
        aten._unique2.default,
        aten.unique_consecutive.default,
        aten.unique_dim.default,
        aten.repeat_interleave.Tensor,
        aten.bincount.default,  # its length is the largest value
        aten.histc.default,  # its range, when not given, is the data's
        aten._linalg_check_errors.default,  # linalg.solve/inv/cholesky raising on singular input
    }
)
# indexing with a boolean mask: its shape is the mask's count (a nonzero inside the kernel)
MASK_INDEXING = frozenset({aten.index.Tensor, aten.index_put.default, aten.index_put_.default})


class HostSyncs(TorchDispatchMode):
    """While active, counts the reads that would make the host wait for the device: an operation
    of ``HOST_READS``, or a copy to the CPU, on a tensor that lives on the device. Which tensors
    live there is followed, not read off ``.device``, so the count is the same on a CPU: the
    tensors ``mark``ed (the weights, each batch) and every tensor an operation derives from them
    (activations, gradients, the optimizer's moments, losses). What the host makes on its own (a
    seeded draw, the optimizer's step counter) is never counted. ``count`` in all, ``ops`` by
    operation. (On a CPU, copies to the CPU and ``tolist``/``numpy``, which bypass the dispatcher
    there, are not seen.)"""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.resident = WeakTensorKeyDictionary()

    @property
    def count(self) -> int:
        return sum(self.ops.values())

    def mark(self, *tensors: object) -> None:
        """Tensors that live on the device (nested in tuples, lists and dicts)."""
        for t in leaves(tensors):
            if isinstance(t, torch.Tensor):
                self.resident[t] = True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        derived = any(isinstance(t, torch.Tensor) and t in self.resident for t in leaves(args))
        if derived and (reads_on_host(func, args) or _to_host(func, args, kwargs)):
            self.ops[str(func)] += 1
        out = func(*args, **kwargs)
        if derived:
            self.mark(out)
        return out


def _to_host(func, args, kwargs) -> bool:
    """Whether ``func`` copies a tensor from a device to the CPU (on a CPU, no copy is one)."""
    if func is aten._to_copy.default:
        target = kwargs.get("device")
        return target is not None and torch.device(target).type == "cpu" != args[0].device.type
    return func is aten.copy_.default and args[0].device.type == "cpu" != args[1].device.type


def reads_on_host(func, args) -> bool:
    """Whether the operation ``func(*args)`` needs a value of its inputs on the host."""
    if func in HOST_READS:
        return True
    return func in MASK_INDEXING and any(
        isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in args[1]
    )


def leaves(x: object) -> Iterator[object]:
    """The leaves of nested tuples, lists and dicts (an operation's arguments, a batch); faster
    than torch's pytree on the hot path of a dispatch mode."""
    if isinstance(x, tuple | list):
        for item in x:
            yield from leaves(item)
    elif isinstance(x, dict):
        for item in x.values():
            yield from leaves(item)
    else:
        yield x


class CountHostSyncs(Callback):
    """Counts, with ``syncs`` active around the fit, the host syncs of each training step:
    ``per_step[s]`` those from the start of step ``s`` to the start of the next (its forward,
    backward, optimizer step, the callbacks after it, and a validation that follows it). Marks
    the weights at the start of the fit and every batch as it arrives."""

    def __init__(self, syncs: HostSyncs) -> None:
        self.syncs = syncs
        self.per_step: dict[int, int] = {}
        self._step: tuple[int, int] | None = None  # (step, count at its start)

    def on_fit_start(self, trainer, pl_module) -> None:
        self.syncs.mark(*pl_module.parameters(), *pl_module.buffers())

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._close()
        self.syncs.mark(batch)
        self._step = (trainer.global_step, self.syncs.count)

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self.syncs.mark(batch)

    def on_train_end(self, trainer, pl_module) -> None:
        self._close()

    def _close(self) -> None:
        if self._step is not None:
            step, start = self._step
            self.per_step[step] = self.syncs.count - start
            self._step = None
