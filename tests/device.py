"""A second device a CPU can have, for the tests that GPU runs hit what CPU runs cannot.

``OnDevice`` tensors say they live on ``DEVICE`` (``meta``, the one other device a CPU build of
torch knows, so autograd, ``.device`` and ``device=`` work as on a GPU) while holding real CPU
data, so the engine computes real numbers. Inside ``second_device()`` every operation runs on
that data and is checked as a GPU checks it: one that mixes a tensor on the device with a CPU
tensor of one or more dimensions fails (a 0-dim CPU tensor is a scalar, which CUDA takes too;
indexing with CPU indices and copies across devices are allowed, as on CUDA); a factory or a
``.to`` that names ``DEVICE`` makes an ``OnDevice`` tensor; one that names no device makes a CPU
tensor, as on a GPU. It also counts what would stop the host on a GPU: reading a device
tensor's value (``benchmarks.syncs.reads_on_host``) and blocking host-to-device
copies (CPU indices included, which CUDA copies over).
(``meta`` tensors alone would not do: a meta kernel takes a CPU index without complaint and has
no values to branch on.)
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.syncs import leaves, reads_on_host

DEVICE = torch.device("meta")
CPU = torch.device("cpu")
aten = torch.ops.aten
# CUDA takes CPU indices here (and copies them over)
CPU_INDICES_ALLOWED = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default}
CROSS_DEVICE = {aten.copy_.default, aten._to_copy.default, aten.lift_fresh.default}


class DeviceMismatch(RuntimeError):
    """What CUDA raises as "Expected all tensors to be on the same device"."""


class OnDevice(torch.Tensor):
    """A tensor on ``DEVICE`` holding CPU data (``inner``)."""

    inner: torch.Tensor

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> OnDevice:
        out = torch.Tensor._make_wrapper_subclass(
            cls,
            inner.shape,
            strides=inner.stride(),
            storage_offset=inner.storage_offset(),
            dtype=inner.dtype,
            device=DEVICE,
            requires_grad=inner.requires_grad,
        )
        out.inner = inner
        return out

    def __repr__(self) -> str:  # noqa: D105
        return f"OnDevice({self.inner!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        """Outside ``second_device()`` (building a module, a test's own reads): checked, not
        counted."""
        return UNCOUNTED.__torch_dispatch__(func, types, args, kwargs)


class SecondDevice(TorchDispatchMode):
    """The mode behind ``second_device()``: runs, checks and counts every operation."""

    def __init__(self) -> None:
        super().__init__()
        self.host_reads: list[str] = []  # the operations that read a device value on the host
        self.blocking_copies: list[str] = []  # host-to-device copies that are not non_blocking

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        tensors = [t for t in leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        on_device = [t for t in tensors if isinstance(t, OnDevice)]
        plain = [t for t in tensors if not isinstance(t, OnDevice)]
        if any(t.device == DEVICE for t in plain):
            raise DeviceMismatch(f"{func}: a real meta tensor reached the second device")
        target = kwargs.get("device")
        if target is not None:
            target = torch.device(target)
            kwargs["device"] = CPU
        if on_device and func not in CROSS_DEVICE:
            if reads_on_host(func, args):
                self.host_reads.append(str(func))
            mixed = [tuple(t.shape) for t in plain if t.dim() > 0]
            if mixed and func in CPU_INDICES_ALLOWED:
                self.blocking_copies.append(f"{func}: CPU indices {mixed}")
            elif mixed:
                raise DeviceMismatch(
                    f"Expected all tensors to be on the same device: {func} got tensors on "
                    f"{DEVICE} and CPU tensors of shapes {mixed}"
                )
        if func is aten._to_copy.default or func is aten.copy_.default:
            self._note_copy(func, args, kwargs, target)
        out = func(*_map(_unwrap, args), **_map(_unwrap, kwargs))
        wrap = target == DEVICE if target is not None else bool(on_device)
        if func is aten.copy_.default:  # in place: the destination keeps its device
            return args[0]
        if func is aten._to_copy.default and target is None:
            wrap = isinstance(args[0], OnDevice)
        return _rewrap(out, args, wrap)

    def _note_copy(self, func, args, kwargs, target) -> None:
        source = args[1] if func is aten.copy_.default else args[0]
        destination = args[0] if func is aten.copy_.default else None
        to_device = isinstance(destination, OnDevice) or target == DEVICE
        if to_device and not isinstance(source, OnDevice):
            if not kwargs.get("non_blocking", len(args) > 2 and args[2]):
                self.blocking_copies.append(str(func))
        elif isinstance(source, OnDevice) and (
            target == CPU or (destination is not None and not to_device)
        ):
            self.host_reads.append(f"{func} to the CPU")


UNCOUNTED = SecondDevice()


def _map(fn, x):
    """``fn`` on each leaf of nested tuples, lists and dicts, keeping their structure."""
    if isinstance(x, tuple | list):
        return type(x)(_map(fn, item) for item in x)
    if isinstance(x, dict):
        return {key: _map(fn, item) for key, item in x.items()}
    return fn(x)


def _unwrap(x):
    return x.inner if isinstance(x, OnDevice) else x


def _rewrap(out, args, wrap: bool):
    """``out`` with its tensors on ``DEVICE`` when ``wrap``; an output that is an input's own
    data (an in-place operation) is that input."""
    inputs = {id(a.inner): a for a in leaves(args) if isinstance(a, OnDevice)}

    def one(x):
        if not isinstance(x, torch.Tensor):
            return x
        if id(x) in inputs:
            return inputs[id(x)]
        return OnDevice(x) if wrap else x

    return _map(one, out)


@contextmanager
def second_device() -> Iterator[SecondDevice]:
    """Operations inside run, checked and counted, on ``DEVICE``."""
    with SecondDevice() as mode:
        yield mode


def to_second_device(module: nn.Module) -> nn.Module:
    """``module`` with every parameter and buffer on ``DEVICE`` (in place; returns it)."""
    for sub in module.modules():
        for name, p in list(sub._parameters.items()):
            if p is not None:
                sub._parameters[name] = nn.Parameter(OnDevice(p.detach()), p.requires_grad)
        for name, b in list(sub._buffers.items()):
            if b is not None:
                sub._buffers[name] = OnDevice(b)
    return module


FACTORIES = {
    torch.tensor,
    torch.as_tensor,
    torch.zeros,
    torch.ones,
    torch.full,
    torch.empty,
    torch.arange,
    torch.rand,
    torch.randn,
    torch.randint,
    torch.randperm,
    torch.linspace,
    torch.eye,
}
PACKAGE = str(Path(__file__).resolve().parents[1] / "src" / "pelab")
# the host side: what a task, the data and the analysis make stays on the CPU by design
HOST_SIDE = tuple(f"{PACKAGE}/{part}" for part in ("tasks/", "data/", "analysis/", "inspect/"))


class DevicelessTensors(TorchFunctionMode):
    """While active, notes every tensor that pelab's engine makes without naming its device
    (``device=``) outside a constructor: ``found`` holds ``file:line function`` of each. On a
    GPU such a tensor lands on the CPU, and the first operation that meets a parameter fails."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FACTORIES and kwargs.get("device") is None:
            where = _engine_caller()
            if where is not None:
                self.found.append(where)
        return func(*args, **kwargs)


def _engine_caller() -> str | None:
    """``file:line function`` of the pelab code that called the factory, unless it is on the
    host side or in a constructor (None)."""
    frame = sys._getframe(2)
    while frame is not None and "/torch/" in frame.f_code.co_filename:
        frame = frame.f_back
    if frame is None:
        return None
    code = frame.f_code
    if not code.co_filename.startswith(PACKAGE) or code.co_filename.startswith(HOST_SIDE):
        return None
    if code.co_name == "__init__":
        return None
    return f"{code.co_filename.removeprefix(PACKAGE + '/')}:{frame.f_lineno} {code.co_name}"
