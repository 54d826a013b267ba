"""Rotary position embedding: q and k are rotated by angles proportional to their positions."""

from __future__ import annotations

import torch
from einops import rearrange
from torch import Tensor

from pelab.pe.base import ConfigError, ModelDims, PositionalEncoding, Positions, register_pe

ROPE_LAYOUTS = ("interleaved", "half")


def rotate(x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> Tensor:
    """Rotate feature pairs of ``x: [b, h, n, r]`` by angles with ``cos, sin: [b|1, n, r/2]``.

    ``interleaved`` pairs dims (2i, 2i+1) as in the RoFormer paper; ``half`` pairs dims
    (i, i + r/2) as in GPT-NeoX and HF Llama. The two are the same map up to a fixed permutation
    of head dimensions.
    """
    cos, sin = cos[:, None], sin[:, None]  # broadcast over heads: [b|1, 1, n, r/2]
    if layout == "interleaved":
        x1, x2 = rearrange(x, "... (r two) -> two ... r", two=2)
        out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
        return rearrange(out, "... r two -> ... (r two)")
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


@register_pe("rope")
class RotaryPE(PositionalEncoding):
    """RoPE (Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding").

    Each pair of the first ``r = fraction * head_dim`` dims of q at position m (k at n) is rotated
    by ``m * theta_i`` with ``theta_i = base^(-2i/r)``, so ``<R(m) q, R(n) k>`` depends on m - n
    only. Remaining dims pass through unrotated (GPT-NeoX's partial rotary). Rotation runs in
    float32 whatever the autocast dtype.
    """

    def __init__(
        self,
        dims: ModelDims,
        base: float = 10000.0,
        layout: str = "interleaved",
        fraction: float = 1.0,
    ) -> None:
        super().__init__(dims)
        if layout not in ROPE_LAYOUTS:
            raise ConfigError(f"unknown pe.layout {layout!r}; valid choices: {ROPE_LAYOUTS}")
        if not 0.0 < fraction <= 1.0:
            raise ConfigError(f"pe.fraction must be in (0, 1], got {fraction}")
        self.rot_dim = int(dims.head_dim * fraction)
        if self.rot_dim % 2 or self.rot_dim == 0:
            raise ConfigError(
                f"pe=rope rotates pairs of dims, so fraction * head_dim must be even and > 0; got "
                f"head_dim={dims.head_dim} (model.net.d_model={dims.d_model} / model.net.n_heads={dims.n_heads}) "
                f"and fraction={fraction} -> {dims.head_dim * fraction:g} dims"
            )
        self.layout = layout
        inv_freq = base ** (-torch.arange(0, self.rot_dim, 2, dtype=torch.float32) / self.rot_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def cos_sin(self, pos: Tensor) -> tuple[Tensor, Tensor]:
        """``pos: [b|1, n]`` -> cos, sin ``[b|1, n, r/2]`` in float32."""
        angles = pos.float()[..., None] * self.inv_freq
        return angles.cos(), angles.sin()

    def transform_qk(self, q: Tensor, k: Tensor, pos: Positions) -> tuple[Tensor, Tensor]:
        cos_q, sin_q = pos.memo((id(self), "q"), lambda: self.cos_sin(pos.q))
        cos_k, sin_k = pos.memo((id(self), "k"), lambda: self.cos_sin(pos.k))
        return self.rotate(q, cos_q, sin_q), self.rotate(k, cos_k, sin_k)

    def rotate(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        r = self.rot_dim
        rotated = rotate(x[..., :r].float(), cos, sin, self.layout).to(x.dtype)
        return torch.cat((rotated, x[..., r:]), dim=-1) if r < x.shape[-1] else rotated
