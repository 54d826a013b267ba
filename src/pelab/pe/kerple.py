"""KERPLE: a conditionally positive definite kernel of the distance, used as an attention bias."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple

import torch
from torch import Tensor, nn

from pelab.pe.base import ModelDims, PositionalEncoding, register_pe
from pelab.positions import Positions


class Kernel(NamedTuple):
    bias: Callable[[Tensor, Tensor, Tensor], Tensor]  # (distance, r1, r2) -> bias
    r1_init: float  # r1 ~ U(0, r1_init)
    r2_init: float  # r2 ~ U(0, r2_init)
    r2_max: float | None  # upper bound of r2, if any


def log_kernel(distance: Tensor, r1: Tensor, r2: Tensor) -> Tensor:
    return -r1 * torch.log1p(r2 * distance)


def power_kernel(distance: Tensor, r1: Tensor, r2: Tensor) -> Tensor:
    return -r1 * distance.pow(r2)


KernelName = Literal["log", "power"]  # pe.kernel: KERNELS' keys
KERNELS = {
    "log": Kernel(log_kernel, r1_init=2.0, r2_init=1.0, r2_max=None),
    "power": Kernel(power_kernel, r1_init=1.0, r2_init=2.0, r2_max=2.0),
}


@register_pe("kerple")
class KerplePE(PositionalEncoding):
    """KERPLE (Chi, Fan, Ramadge & Rudnicky 2022, "KERPLE: Kernelized Relative Positional
    Embedding for Length Extrapolation"), both of its kernels, with ``r1, r2 > 0`` per head:

    - ``kernel: log``:   ``logit_ij += -r1 * log(1 + r2 * |i - j|)``
    - ``kernel: power``: ``logit_ij += -r1 * |i - j|^r2`` with ``0 < r2 <= 2``

    Both are conditionally positive definite kernels of the positions; the softmax absorbs the
    constant shift that would make them positive definite. The bias depends on ``i - j`` only,
    so it is invariant to shifting all positions.

    Choices, all as in the authors' released code (chijames/KERPLE, ``ParallelKerpleLog`` and
    ``ParallelKerplePower``):

    - one pair ``(r1, r2)`` per head, shared by all layers (one module serves every layer);
    - uniform initialisation: log ``r1 ~ U(0, 2)``, ``r2 ~ U(0, 1)``; power ``r1 ~ U(0, 1)``,
      ``r2 ~ U(0, 2)``;
    - positivity by projection: before each use ``r1, r2`` are clamped in place to
      ``>= 1e-2`` (and ``r2 <= 2`` for power), i.e. projected gradient descent. A parameter
      pushed out of range sits on the boundary and still gets its true gradient, so it can come
      back (a clamp inside the graph would zero that gradient for good).

    Bidirectional (encoder) use: the paper trains causal models, where ``|i - j| = i - j`` on
    every visible pair. The kernels are functions of ``|i - j|``, so an encoder gets the
    symmetric bias: the same ``r1, r2`` for keys before and after the query (as ``AlibiPE``).
    """

    eps = 1e-2  # lower bound of r1 and r2, the authors' value
    shift = "relative"

    def __init__(self, dims: ModelDims, kernel: KernelName = "log") -> None:
        super().__init__(dims)
        self.kernel = KERNELS[kernel]
        self.r1 = nn.Parameter(torch.rand(dims.n_heads) * self.kernel.r1_init)  # [h]
        self.r2 = nn.Parameter(torch.rand(dims.n_heads) * self.kernel.r2_init)  # [h]

    def logit_bias(self, pos: Positions, layer: int) -> Tensor:
        return pos.memo(id(self), lambda: self._bias(pos))

    @torch.no_grad()
    def constrain(self) -> None:
        """Clamp ``r1, r2`` into their valid ranges, in place, before each forward (outside
        autograd, so a graph built earlier in the same step stays valid)."""
        self.r1.clamp_(min=self.eps)
        self.r2.clamp_(min=self.eps, max=self.kernel.r2_max)

    def _bias(self, pos: Positions) -> Tensor:
        # the distances do not read the weights: a stack's members share them (memoised apart)
        distance = pos.memo((id(self), "distance"), lambda: pos.delta().abs().float()[:, None])
        r1, r2 = self.r1[:, None, None], self.r2[:, None, None]  # [h, 1, 1]
        return self.kernel.bias(distance, r1, r2)  # [b|1, h, i, j]
