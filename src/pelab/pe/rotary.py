"""Rotary position embedding: q and k are rotated by angles proportional to their positions.

Context-length scaling (position interpolation, NTK, dynamic NTK, YaRN) only changes *which
frequencies* RoPE uses (and, for YaRN, a temperature), so it is a frequency strategy of the one
``RotaryPE`` (``pe.scaling``, ``pelab.pe.rotary_scaling``), not a new encoding. xPos is RoPE
whose rotations also scale.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from torch import Tensor

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims, PositionalEncoding, register_pe
from pelab.pe.rotary_scaling import SCALINGS, RotaryScaling, ScalingInput
from pelab.positions import Positions


def interleaved_rotation(angles: Tensor, magnitude: Tensor | None = None) -> Tensor:
    """``angles: [b|1, n, r/2]`` -> complex factors ``magnitude * e^(i angle)`` (unit when
    ``magnitude`` is None), ``[b|1, 1, n, r/2]``."""
    magnitude = torch.ones_like(angles) if magnitude is None else magnitude
    return torch.polar(magnitude, angles)[:, None]


def rotate_interleaved(x: Tensor, rotation: Tensor) -> Tensor:
    """RoFormer's layout: dims (2i, 2i+1) form a pair, rotated as one complex product
    ``(x_2i + i x_2i+1) e^(i angle_i)``. ``x: [b, h, n, r]``."""
    pairs = torch.view_as_complex(x.float().unflatten(-1, (-1, 2)))
    return torch.view_as_real(pairs * rotation).flatten(-2)


def half_rotation(angles: Tensor, magnitude: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """``angles: [b|1, n, r/2]`` -> ``magnitude * cos`` and ``magnitude * sin``, each
    ``[b|1, 1, n, r/2]`` (unit when ``magnitude`` is None)."""
    cos, sin = angles.cos(), angles.sin()
    if magnitude is not None:
        cos, sin = cos * magnitude, sin * magnitude
    return cos[:, None], sin[:, None]


def rotate_half(x: Tensor, rotation: tuple[Tensor, Tensor]) -> Tensor:
    """GPT-NeoX / HF Llama layout: dims (i, i + r/2) form a pair. The same map as the
    interleaved layout up to a fixed permutation of head dimensions. ``x: [b, h, n, r]``."""
    cos, sin = rotation
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


RotaryLayout = Literal["interleaved", "half"]  # pe.layout: LAYOUTS' keys
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

    ``keep_frequencies = p`` is p-RoPE (Barbero et al. 2025, "Round and Round We Go! What makes
    Rotary Positional Encodings useful?"): of the ``r/2`` frequencies only the ``floor(p r/2)``
    highest keep their value, the lowest ``theta_i`` (large ``i``) are set to 0, so those pairs
    never turn (p = 1: RoPE, p = 0: no rotation at all). Unlike ``fraction``, which spreads the
    whole frequency range over fewer dims, it keeps every dim and drops the slow end of the
    range. The zeros hold under every ``scaling``.

    ``scaling`` picks a strategy record (see ``SCALINGS``) with factor ``s = scaling_factor``;
    ``none`` is plain RoPE. ``original_max_len`` (the context length the model was trained on,
    needed by ``dynamic_ntk`` and ``yarn``) defaults to ``dims.train_max_len``; set it to
    override. YaRN's temperature multiplies all of q and k (rotated or not), so the logits are
    scaled by exactly ``1/t = (0.1 ln s + 1)^2``. ``dynamic_ntk`` reads the current length as the
    largest position + 1, so unlike the others it is shift invariant only below
    ``original_max_len``.
    """

    shift = "relative"

    def __init__(
        self,
        dims: ModelDims,
        base: float = 10000.0,
        layout: RotaryLayout = "interleaved",
        fraction: float = 1.0,
        scaling: str = "none",
        scaling_factor: float = 1.0,
        original_max_len: int | None = None,
        keep_frequencies: float = 1.0,
    ) -> None:
        super().__init__(dims)
        if not 0.0 <= keep_frequencies <= 1.0:
            raise ConfigError(
                f"pe.keep_frequencies (p-RoPE's p) must be in [0, 1], got {keep_frequencies}"
            )
        if not 0.0 < fraction <= 1.0:
            raise ConfigError(f"pe.fraction must be in (0, 1], got {fraction}")
        self.rot_dim = int(dims.head_dim * fraction)
        if self.rot_dim % 2 or self.rot_dim == 0:
            raise ConfigError(
                f"pe={self.pe_name} rotates pairs of dims, so fraction * head_dim must be even "
                f"and > 0; got head_dim={dims.head_dim} (model.net.d_model={dims.d_model} / "
                f"model.net.n_heads={dims.n_heads}) and fraction={fraction} -> "
                f"{dims.head_dim * fraction:g} dims"
            )
        if original_max_len is None:
            original_max_len = dims.train_max_len or None
        self.scaling = self._check_scaling(scaling, scaling_factor, original_max_len)
        self.layout, self.base = layout, base
        self.scaling_factor, self.original_max_len = float(scaling_factor), original_max_len
        self.supports_kv_cache = not self.scaling.length_dependent  # cached keys keep old θ
        self.prefix_only = not self.scaling.length_dependent  # θ follows the whole length
        self.make_rotation, self.apply_rotation = LAYOUTS[layout]
        inv_freq = base ** (-torch.arange(0, self.rot_dim, 2, dtype=torch.float32) / self.rot_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # unscaled theta_i, [r/2]
        kept = torch.arange(self.rot_dim // 2) < int(keep_frequencies * (self.rot_dim // 2) + 1e-9)
        self.register_buffer("kept", kept.float(), persistent=False)  # p-RoPE: 1 turns, 0 not

    def _check_scaling(
        self, name: str, factor: float, original_max_len: int | None
    ) -> RotaryScaling:
        """The record of ``pe.scaling=name``, once the options fit it."""
        if name not in SCALINGS:
            raise ConfigError(f"unknown pe.scaling {name!r}; valid choices: {list(SCALINGS)}")
        scaling = SCALINGS[name]
        if not scaling.uses_factor and factor != 1.0:
            raise ConfigError(
                f"pe.scaling_factor={factor} has no effect with pe.scaling={name}; pick a "
                f"strategy: {[n for n, s in SCALINGS.items() if s.uses_factor]}"
            )
        if factor < 1.0:
            raise ConfigError(
                f"pe.scaling_factor must be >= 1 (a context extension), got {factor}"
            )
        if scaling.needs_original_max_len and (original_max_len is None or original_max_len < 1):
            got = "neither is set" if original_max_len is None else f"got {original_max_len}"
            raise ConfigError(
                f"pe.scaling={name} needs pe.original_max_len or the model's train_max_len (the "
                f"longest sequence the model was trained on, >= 1); {got}"
            )
        if self.rot_dim < scaling.min_rot_dim:
            raise ConfigError(
                f"pe.scaling={name} needs r >= {scaling.min_rot_dim} rotated dims; got "
                f"r={self.rot_dim} (pe.fraction * head_dim)"
            )
        return scaling

    def frequencies(self, pos: Positions) -> tuple[Tensor, float]:
        """The scaled frequencies ``[r/2]`` and q/k scale for this forward pass."""
        current_len = None
        if self.scaling.length_dependent:
            current_len = int(torch.maximum(pos.q.max(), pos.k.max())) + 1
        given = ScalingInput(
            self.inv_freq,
            self.rot_dim,
            self.base,
            self.scaling_factor,
            self.original_max_len,
            current_len,
        )
        frequencies = self.scaling.frequencies(given) * self.kept
        return frequencies, self.scaling.qk_scale(self.scaling_factor)

    def magnitude(self, positions: Tensor, sign: int) -> Tensor | None:
        """Per-pair scale of the rotation at ``positions: [b|1, n]`` (None: pure rotation);
        ``sign`` is +1 for queries, -1 for keys."""
        return None

    def rotations(self, pos: Positions) -> tuple[Tensor, Tensor, float]:
        inv_freq, scale = self.frequencies(pos)
        rot_q = self.make_rotation(pos.q.float()[..., None] * inv_freq, self.magnitude(pos.q, 1))
        rot_k = self.make_rotation(pos.k.float()[..., None] * inv_freq, self.magnitude(pos.k, -1))
        return rot_q, rot_k, scale

    def transform_qk(
        self, q: Tensor, k: Tensor, pos: Positions, layer: int
    ) -> tuple[Tensor, Tensor]:
        # computed once per forward pass and shared by all layers
        rot_q, rot_k, scale = pos.memo((id(self), "rotations"), lambda: self.rotations(pos))
        q, k = self.rotate(q, rot_q), self.rotate(k, rot_k)
        if scale != 1.0:  # YaRN: sqrt(1/t) on each of q and k, 1/t on the logits
            q, k = q * scale, k * scale
        return q, k

    def rotate(self, x: Tensor, rotation: Tensor | tuple[Tensor, Tensor]) -> Tensor:
        r = self.rot_dim
        rotated = self.apply_rotation(x[..., :r], rotation).to(x.dtype)
        return torch.cat((rotated, x[..., r:]), dim=-1) if r < x.shape[-1] else rotated


# xPos's largest |log| of a q or k scale: e^70 ~ 2.5e30 leaves float32 (largest e^88.7, smallest
# normal e^-87.3) room for the content of q and k and for their products
XPOS_MAX_LOG_SCALE = 70.0


@register_pe("xpos")
class XPosPE(RotaryPE):
    """xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer"), RoPE with a decay.

    Pair ``i`` of q at position n is rotated by ``n theta_i`` and scaled by
    ``zeta_i^((n - c)/gamma)``, of k at position m by ``m theta_i`` and
    ``zeta_i^(-(m - c)/gamma)``, with ``zeta_i = (i / (r/2) + gamma_b) / (1 + gamma_b)`` in
    (0, 1), ``gamma_b = 0.4`` and ``gamma = scale_base = 512`` (the paper's constants), and ``c``
    a constant centre (below). The score of pair i carries
    ``zeta_i^((n - m)/gamma)``: it depends on n - m only and decays as a key lies further back.

    The centre ``c = (max_len - 1) / 2`` cancels in every score; it keeps both scales within
    ``e^(+-XPOS_MAX_LOG_SCALE)`` for positions in ``[0, max_len)``, where ``zeta^(-m/gamma)``
    alone overflows float32 beyond ``m ~ 36k`` (torchscale centres likewise, on half the current
    length; a constant centre keeps cached keys valid). A ``max_len`` too long for this is
    refused at construction.

    Causal only (``causal_only``: the base class refuses ``model=encoder``): a key after its
    query (m > n) would be amplified by ``zeta^(-(m - n)/gamma)``, growing without bound.
    Every option of ``RotaryPE`` (layout, fraction, scaling) applies; the decay acts on the
    rotated dims. No trainable parameters.
    """

    causal_only = True

    def __init__(
        self, dims: ModelDims, gamma_b: float = 0.4, scale_base: float = 512.0, **rotary: Any
    ) -> None:
        """``rotary``: any option of ``RotaryPE`` (base, layout, fraction, scaling, ...)."""
        if gamma_b <= 0 or scale_base <= 0:
            raise ConfigError(
                f"pe.gamma_b and pe.scale_base must be > 0, got {gamma_b} and {scale_base}"
            )
        super().__init__(dims, **rotary)
        # the smallest zeta, zeta_0 = gamma_b / (1 + gamma_b), scales the most: |log scale| of a
        # position p is |p - c| * log(1/zeta_0) / gamma, at most (max_len - 1)/2 * that
        decay = math.log1p(1 / gamma_b) / scale_base
        longest = int(2 * XPOS_MAX_LOG_SCALE / decay) + 1
        if dims.max_len > longest:
            raise ConfigError(
                f"pe=xpos scales q and k by up to e^(+-{(dims.max_len - 1) / 2 * decay:.0f}) for "
                f"max_len={dims.max_len} (the longest sequence, or positions.max_position), too "
                f"close to float32's limit e^88.7 (at most e^(+-{XPOS_MAX_LOG_SCALE:g}) is "
                f"allowed); with pe.scale_base={scale_base} and pe.gamma_b={gamma_b} the longest "
                f"max_len is {longest}: raise pe.scale_base or shorten the sequences"
            )
        self.scale_base = scale_base
        self.centre = (dims.max_len - 1) / 2
        i = torch.arange(self.rot_dim // 2, dtype=torch.float32)
        self.register_buffer(
            "zeta", (i / (self.rot_dim / 2) + gamma_b) / (1 + gamma_b), persistent=False
        )  # [r/2]

    def magnitude(self, positions: Tensor, sign: int) -> Tensor:
        # [b|1, n, 1] exponents over [r/2] bases -> [b|1, n, r/2]
        centred = positions.float()[..., None] - self.centre
        return self.zeta ** (sign * centred / self.scale_base)
