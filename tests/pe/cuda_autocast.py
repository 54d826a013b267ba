"""CUDA autocast's policy on the CPU: the CPU's own autocast (bf16) does the lower-precision
list (matmuls, linear layers), and ``CudaFp32Policy`` adds what CUDA autocast does that the
CPU's does not: its "autocast to float32" operations (softmax, layer_norm, cumsum, exp, log,
softplus, ...) get float32 inputs, and its "promote to the widest type" operations get inputs
of one dtype (PyTorch's "Automatic Mixed Precision" docs, "CUDA Ops that can autocast to
float32" and "CUDA Ops that promote to the widest input type"). A GPU run meets bf16 and float32
tensors meeting where a CPU run never does; the tests run every encoding through it."""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

# CUDA's autocast-to-float32 list (by the callable's name: torch.*, Tensor.*, F.*)
CUDA_FP32 = {
    "__pow__", "__rdiv__", "__rpow__", "__rtruediv__", "acos", "asin", "cosh", "erfinv", "exp",
    "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt", "sinh", "tan", "pow",
    "softplus", "layer_norm", "group_norm", "norm", "nuclear_norm", "frobenius_norm",
    "cosine_similarity",
    "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "hinge_embedding_loss", "kl_div",
    "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss",
    "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "softmax", "log_softmax", "softmin", "cumprod", "cumsum", "prod", "sum", "normalize",
    "cross_entropy",
}  # fmt: skip
# CUDA's promote-to-the-widest list
CUDA_PROMOTE = {
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sample", "index_put",
    "scatter_add", "tensordot",
}  # fmt: skip
LOW = (torch.bfloat16, torch.float16)


def _cast(value, dtype):
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != dtype:
        return value.to(dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype) for v in value)
    return value


class CudaFp32Policy(TorchFunctionMode):
    """While active and while autocast is on (``in_fp32`` turns it off: its islands are left
    alone), CUDA's float32 and promote lists act as CUDA's autocast would; ``seen`` counts the
    operations it cast, by name (a test that casts nothing tests nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, int] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if torch.is_autocast_enabled("cpu"):
            tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
            low = any(t.dtype in LOW for t in tensors if t.is_floating_point())
            if name in CUDA_FP32 and low:
                self.seen[name] = self.seen.get(name, 0) + 1
                args, kwargs = (
                    _cast(args, torch.float32),
                    {k: _cast(v, torch.float32) for k, v in kwargs.items()},
                )
            elif name in CUDA_PROMOTE and low:
                widest = max((t.dtype for t in tensors if t.is_floating_point()),
                             key=lambda d: torch.finfo(d).bits)  # fmt: skip
                self.seen[name] = self.seen.get(name, 0) + 1
                args = _cast(args, widest)
                kwargs = {k: _cast(v, widest) for k, v in kwargs.items()}
        return func(*args, **kwargs)


MATMULS = {"linear", "matmul", "__matmul__", "mm", "bmm", "addmm", "baddbmm", "einsum"}


def tf32(x: torch.Tensor) -> torch.Tensor:
    """``x`` (float32) rounded to TF32's 10 mantissa bits, to nearest, as a GPU's tensor cores
    read it."""
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


class Tf32Matmuls(TorchFunctionMode):
    """While active, float32 matrix products round their inputs to TF32 unless the matmul
    precision is ``highest``: what CUDA does under ``train.py``'s precision ``high``."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") in MATMULS and (
            torch.get_float32_matmul_precision() != "highest"
        ):
            args = tuple(
                tf32(a) if isinstance(a, torch.Tensor) and a.dtype == torch.float32 else a
                for a in args
            )
        return func(*args, **kwargs)
