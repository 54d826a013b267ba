"""Rotary position embedding: q and k are rotated by angles proportional to their positions."""

from __future__ import annotations

import torch
from torch import Tensor

from pelab.pe.base import ConfigError, ModelDims, PositionalEncoding, Positions, register_pe


def interleaved_rotation(angles: Tensor) -> Tensor:
    """``angles: [b|1, n, r/2]`` -> unit complex factors ``e^(i angle)``, ``[b|1, 1, n, r/2]``."""
    return torch.polar(torch.ones_like(angles), angles)[:, None]


def rotate_interleaved(x: Tensor, rotation: Tensor) -> Tensor:
    """RoFormer's layout: dims (2i, 2i+1) form a pair, rotated as one complex product
    ``(x_2i + i x_2i+1) e^(i angle_i)``. ``x: [b, h, n, r]``."""
    pairs = torch.view_as_complex(x.float().unflatten(-1, (-1, 2)))
    return torch.view_as_real(pairs * rotation).flatten(-2)


def half_rotation(angles: Tensor) -> tuple[Tensor, Tensor]:
    """``angles: [b|1, n, r/2]`` -> ``cos, sin`` as ``[b|1, 1, n, r/2]``."""
    return angles.cos()[:, None], angles.sin()[:, None]


def rotate_half(x: Tensor, rotation: tuple[Tensor, Tensor]) -> Tensor:
    """GPT-NeoX / HF Llama layout: dims (i, i + r/2) form a pair. The same map as the
    interleaved layout up to a fixed permutation of head dimensions. ``x: [b, h, n, r]``."""
    cos, sin = rotation
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


LAYOUTS = {
    "interleaved": (interleaved_rotation, rotate_interleaved),
    "half": (half_rotation, rotate_half),
}


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
        if layout not in LAYOUTS:
            raise ConfigError(f"unknown pe.layout {layout!r}; valid choices: {list(LAYOUTS)}")
        if not 0.0 < fraction <= 1.0:
            raise ConfigError(f"pe.fraction must be in (0, 1], got {fraction}")
        self.rot_dim = int(dims.head_dim * fraction)
        if self.rot_dim % 2 or self.rot_dim == 0:
            raise ConfigError(
                f"pe=rope rotates pairs of dims, so fraction * head_dim must be even and > 0; "
                f"got head_dim={dims.head_dim} (model.net.d_model={dims.d_model} / "
                f"model.net.n_heads={dims.n_heads}) and fraction={fraction} -> "
                f"{dims.head_dim * fraction:g} dims"
            )
        self.layout = layout
        self.make_rotation, self.apply_rotation = LAYOUTS[layout]
        inv_freq = base ** (-torch.arange(0, self.rot_dim, 2, dtype=torch.float32) / self.rot_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def angles(self, pos: Tensor) -> Tensor:
        """``pos: [b|1, n]`` -> rotation angles ``m * theta_i`` as ``[b|1, n, r/2]`` (float32)."""
        return pos.float()[..., None] * self.inv_freq

    def transform_qk(self, q: Tensor, k: Tensor, pos: Positions) -> tuple[Tensor, Tensor]:
        # computed once per forward pass and shared by all layers
        rot_q = pos.memo((id(self), "q"), lambda: self.make_rotation(self.angles(pos.q)))
        rot_k = pos.memo((id(self), "k"), lambda: self.make_rotation(self.angles(pos.k)))
        return self.rotate(q, rot_q), self.rotate(k, rot_k)

    def rotate(self, x: Tensor, rotation: Tensor | tuple[Tensor, Tensor]) -> Tensor:
        r = self.rot_dim
        rotated = self.apply_rotation(x[..., :r], rotation).to(x.dtype)
        return torch.cat((rotated, x[..., r:]), dim=-1) if r < x.shape[-1] else rotated
