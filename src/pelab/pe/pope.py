"""PoPE: polar-coordinate position embeddings, RoPE whose phase is position alone.

Gopalakrishnan, Csordás, Schmidhuber & Mozer 2025, "Decoupling the 'What' and 'Where' With Polar
Coordinate Positional Embeddings" (arXiv 2509.10534).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims, PositionalEncoding, register_pe
from pelab.positions import Positions

# the learned key phase bias delta lives in [-2 pi, 0] (clamped where it is used)
PHASE_BIAS_RANGE = (-2 * math.pi, 0.0)
PhaseBiasInit = Literal["zero", "uniform"]  # delta = 0 | delta ~ U[-2 pi, 0]


def polar(magnitude: Tensor, phase: Tensor) -> Tensor:
    """``[mu cos(phi) ; mu sin(phi)]``: the real and imaginary parts of ``mu e^(i phi)`` side by
    side, ``[..., d]`` each -> ``[..., 2d]``; the dot product of two such vectors is
    ``sum_c mu_c mu'_c cos(phi_c - phi'_c)``, the real part of the complex inner product."""
    return torch.cat((magnitude * phase.cos(), magnitude * phase.sin()), dim=-1)


@register_pe("pope")
class PolarPE(PositionalEncoding):
    """PoPE (Gopalakrishnan et al. 2025, arXiv 2509.10534).

    Each of the ``d`` (head dim) components of q at position ``t`` and of k at position ``s``
    becomes a complex number whose magnitude is the content and whose phase is the position::

        q~_tc = softplus(q_tc) e^(i t theta_c)
        k~_sc = softplus(k_sc) e^(i (s theta_c + delta_c))
        a_ts  = Re[sum_c conj(q~_tc) k~_sc]
              = sum_c softplus(q_tc) softplus(k_sc) cos((s - t) theta_c + delta_c)

    with ``d`` frequencies ``theta_c = base^(-c/d)``, ``c = 0 .. d-1`` (RoPE has ``d/2``), so the
    content (the "what") sets only how strongly, and the offset ``s - t`` (the "where") only at
    which phase, a key matches: no content angle enters the phase, unlike RoPE. The score depends
    on ``s - t`` only (``shift = "relative"``), in either direction, so encoders take it too.

    As a real dot product the hook returns ``[mu cos(phi) ; mu sin(phi)]`` (``polar``): q and k
    leave ``transform_qk`` with ``2d`` dims, v keeps ``d``; ``q~ · k~`` is ``a_ts`` above, on the
    fused kernel, the eager path and the key/value cache alike (cached keys keep their phase).
    The attention scale stays ``1/sqrt(d)`` of the model's head dim ``d``, not of ``2d``, as in the
    reference implementations (lucidrains' PoPE-pytorch and x-transformers scale by the head dim
    of q before PoPE doubles it), so nothing is folded into q.

    ``phase_bias`` (default on): the learned key phase bias ``delta_c`` per layer, head and
    frequency, ``[l, h, d]``, clamped to ``[-2 pi, 0]`` where it is used; ``phase_bias_init``
    ``zero`` (the references' default) or ``uniform`` (``U[-2 pi, 0]``, their option). Off, every
    ``delta_c = 0`` and PoPE has no parameters. One ``delta`` per layer because each attention
    layer owns its parameters (x-transformers shares one ``[h, d]`` bias across layers).
    Magnitudes and phases are computed in float32 whatever the autocast dtype; the position
    phases once per forward, shared by the layers.
    """

    shift = "relative"

    def __init__(
        self,
        dims: ModelDims,
        base: float = 10000.0,
        phase_bias: bool = True,
        phase_bias_init: PhaseBiasInit = "zero",
    ) -> None:
        super().__init__(dims)
        if base <= 0:
            raise ConfigError(f"pe.base (the frequency base) must be > 0, got {base}")
        if not phase_bias and phase_bias_init != "zero":
            raise ConfigError(
                f"pe.phase_bias_init={phase_bias_init} has no effect with pe.phase_bias=false; "
                "set pe.phase_bias=true or pe.phase_bias_init=zero"
            )
        self.base, self.phase_bias_init = base, phase_bias_init
        d = dims.head_dim
        theta = base ** (-torch.arange(d, dtype=torch.float32) / d)
        self.register_buffer("theta", theta, persistent=False)  # [d]
        self.phase_bias: nn.Parameter | None = None
        if phase_bias:
            delta = torch.zeros(dims.n_layers, dims.n_heads, d)  # [l, h, d]
            if phase_bias_init == "uniform":
                delta.uniform_(*PHASE_BIAS_RANGE)
            self.phase_bias = nn.Parameter(delta)

    def phases(self, pos: Positions) -> tuple[Tensor, Tensor]:
        """The position phases ``t theta_c`` of the queries and ``s theta_c`` of the keys,
        ``[b|1, 1, n, d]`` each."""
        return tuple(p.float()[:, None, :, None] * self.theta for p in (pos.q, pos.k))

    def delta(self, layer: int) -> Tensor | None:
        """The clamped key phase bias of block ``layer``, ``[h, 1, d]`` (None: no bias)."""
        if self.phase_bias is None:
            return None
        return self.phase_bias[layer].clamp(*PHASE_BIAS_RANGE)[:, None]

    def transform_qk(
        self, q: Tensor, k: Tensor, pos: Positions, layer: int
    ) -> tuple[Tensor, Tensor]:
        # q, k: [b, h, n, d] -> [b, h, n, 2d]; the phases are computed once per forward
        phase_q, phase_k = pos.memo((id(self), "phases"), lambda: self.phases(pos))
        delta = self.delta(layer)
        if delta is not None:
            phase_k = phase_k + delta  # [b|1, h, n, d]
        q_out = polar(F.softplus(q.float()), phase_q)
        k_out = polar(F.softplus(k.float()), phase_k)
        return q_out.to(q.dtype), k_out.to(k.dtype)
