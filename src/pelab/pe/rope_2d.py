"""Axial 2-D RoPE: half of the rotated pairs turn with the row, the other half with the column."""

from __future__ import annotations

import torch
from einops import rearrange
from torch import Tensor

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims, register_pe
from pelab.pe.rotary import RotaryLayout, RotaryPE
from pelab.positions import Positions


@register_pe("rope_2d")
class AxialRotaryPE(RotaryPE):
    """RoPE-Axial (Heo et al. 2024, "Rotary Position Embedding for Vision Transformer";
    EVA-02, Fang et al. 2023, likewise) for (row, col) positions.

    Of the ``r = fraction * head_dim`` rotated dims (``r/2`` pairs), the first ``r/4`` pairs of
    q at (r_q, c_q) turn by ``r_q * theta_t``, the last ``r/4`` by ``c_q * theta_t``, with
    ``theta_t = base^(-4t/r)``, ``t < r/4`` (1-D RoPE's frequencies over the ``r/2`` dims of one
    axis). Each pair's score depends on its axis' offset only, so ``<R(r_q, c_q) q,
    R(r_k, c_k) k>`` depends on ``(r_q - r_k, c_q - c_k)`` only. ``base = 100`` as in Heo et
    al. (grids are small: 10000 would leave most pairs barely turning). ``layout`` pairs dims as
    in ``rope`` (interleaved or half); Heo et al. put the column (x) first, a fixed permutation
    of head dims that the q/k projections absorb. Context-length scaling (``rope``'s
    ``pe.scaling``) is 1-D only. No parameters; runs on grids of any size.
    """

    position_dims = 2
    shift = "relative"  # in each axis

    def __init__(
        self,
        dims: ModelDims,
        base: float = 100.0,
        layout: RotaryLayout = "interleaved",
        fraction: float = 1.0,
    ) -> None:
        super().__init__(dims, base=base, layout=layout, fraction=fraction)
        if self.rot_dim % 4:
            raise ConfigError(
                f"pe={self.pe_name} rotates as many pairs by the row as by the column, so "
                f"fraction * head_dim must be a multiple of 4; got head_dim={dims.head_dim} "
                f"(model.net.d_model={dims.d_model} / model.net.n_heads={dims.n_heads}) and "
                f"fraction={fraction} -> {self.rot_dim} dims"
            )
        axis_dim = self.rot_dim // 2
        # one axis' frequencies theta_t = base^(-2t / axis_dim), [r/4] (RoPE's table: [r/2])
        self.inv_freq = base ** (-torch.arange(0, axis_dim, 2, dtype=torch.float32) / axis_dim)

    def angles(self, positions: Tensor) -> Tensor:
        """``[b|1, n, 2]`` (row, col) -> ``[b|1, n, r/2]``: row angles, then column angles."""
        per_axis = positions.float()[..., None] * self.inv_freq  # [b|1, n, 2, r/4]
        return rearrange(per_axis, "b n a t -> b n (a t)")

    def rotations(self, pos: Positions) -> tuple[Tensor, Tensor, float]:
        pos.require(2, f"pe={self.pe_name}")
        return self.make_rotation(self.angles(pos.q)), self.make_rotation(self.angles(pos.k)), 1.0
