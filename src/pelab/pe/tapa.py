"""TAPA: the content score times the cosine of a token-aware phase that grows as |m - n|^alpha."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims, PositionalEncoding, in_fp32, register_pe
from pelab.positions import Positions


@register_pe("tapa")
class TapaPE(PositionalEncoding):
    """TAPA (Wang, Shen, Munos, Zhan, Tian 2025, "Positional Encoding via Token-Aware Phase
    Attention", arXiv 2509.12635), the practical form of section 3, eq. (12).

    Each head's query and key split into an amplitude part, the first ``A = theta D`` dims, and a
    phase part, the other ``P = (1 - theta) D`` (eq. 11: ``q = (q_A, q_P)``), and the logit of the
    query at position ``m`` and the key at ``n`` replaces ``q . k / sqrt(D)`` by::

        Attn(q, k) = q_A . k_A / sqrt(A) * cos(2 pi |m - n|^alpha * q_P . k_P / sqrt(P))

    the general TAPA of eq. (9), ``q^T M k cos(2 pi |m - n|^alpha phi(q, k))``, with the
    diagonal ``M``, ``N`` of eq. (13) and the quadratic phase ``phi = q^T N k`` of eq. (10).
    ``theta`` is ``amplitude_share``; the paper trains with ``theta = 0.5``, ``alpha = 0.1``
    (section 4.1), the defaults. No parameters: the projections q, k are the model's own.

    Choices (the paper is silent on these):

    - Bias: the hook receives ``q . k / sqrt(D) + B``; TAPA replaces the content term and keeps
      ``B``, an additive bias of an encoding composed with this one (``fox pe.base=tapa``; zero
      for ``tapa`` alone), as ``logits - q . k / sqrt(D)``.
    - Encoder (``model=encoder``): eq. (12) as written, symmetric in ``m - n``; the paper trains
      decoders only (and keeps the causal mask, section 5.3), which attention applies after
      this hook as for every encoding.
    - ``|m - n|^alpha`` of the explicit positions ``pos.q``, ``pos.k``, so ``m = n`` gives
      ``cos 0 = 1`` and shifted or randomized positions act through their differences only.
    - Precision: both products and the cosine run in float32 (``in_fp32``): bf16's 8 bits of
      ``q_P . k_P`` would move the phase by up to 0.4% of itself (a radian at a phase of 250).
    - No key/value cache (``supports_kv_cache = False``: greedy decoding re-runs full
      forwards). Cached decoding computes the same function in exact arithmetic (float64: equal
      to 1e-10), but the cosine of phases of tens to hundreds of radians magnifies float32's
      rounding: with the contract tests' std-1 weights cached and full outputs differed by
      0.0014-0.033, against 4e-4 for RoPE, Shaw and ALiBi; so the test's greedy decoding stays
      the teacher-forced pass's function (``pelab.lit_module``, validation by one pass).
    - ``model.net.attn_scale`` scales the queries before this hook, so the amplitude and the
      phase both take the length scale.
    """

    shift = "relative"  # reads only |m - n|
    supports_kv_cache = False  # float32 rounding magnified by the cosine (above)

    def __init__(self, dims: ModelDims, amplitude_share: float = 0.5, alpha: float = 0.1) -> None:
        super().__init__(dims)
        head_dim = dims.head_dim
        share = float(amplitude_share) if _is_number(amplitude_share) else math.nan
        amplitude_dim = round(share * head_dim) if math.isfinite(share) else 0
        if not (
            0.0 < share < 1.0
            and abs(share * head_dim - amplitude_dim) < 1e-9
            and 1 <= amplitude_dim <= head_dim - 1
        ):
            raise ConfigError(
                f"pe.amplitude_share (theta of pe=tapa, the share of each head's {head_dim} dims "
                f"that form the amplitude) must be in (0, 1) with theta * head_dim an integer in "
                f"1 .. {head_dim - 1} (e.g. {1 / head_dim:g} .. {(head_dim - 1) / head_dim:g} in "
                f"steps of {1 / head_dim:g}), got {amplitude_share!r}"
            )
        if not (_is_number(alpha) and 0.0 < float(alpha) < math.inf):
            raise ConfigError(
                f"pe.alpha (the exponent of |m - n| in the phase of pe=tapa) must be a finite "
                f"number > 0, got {alpha!r}"
            )
        self.amplitude_share, self.alpha = share, float(alpha)
        self.amplitude_dim = amplitude_dim  # A = theta D
        self.phase_dim = head_dim - amplitude_dim  # P = (1 - theta) D
        self.scale = 1.0 / math.sqrt(head_dim)  # attention's, to take its content term out

    def distance_phase(self, pos: Positions, dtype: torch.dtype) -> Tensor:
        """``2 pi |m - n|^alpha``, ``[b|1, 1, i, j]``, once per forward (all layers)."""

        def compute() -> Tensor:
            distance = pos.delta().abs().to(dtype)  # [b|1, i, j]
            return (2 * math.pi * distance.pow(self.alpha))[:, None]

        return pos.memo((id(self), "phase", dtype), compute)

    def scores(self, q: Tensor, k: Tensor, pos: Positions) -> Tensor:
        """Eq. (12) for every pair, ``[b, h, i, j]``, of ``q: [b, h, i, D]``, ``k: [b, h, j, D]``:
        the amplitude part ``[..., :A]`` and the phase part ``[..., A:]`` of each."""
        a = self.amplitude_dim
        amplitude = torch.einsum("bhid,bhjd->bhij", q[..., :a], k[..., :a]) / math.sqrt(a)
        phase = torch.einsum("bhid,bhjd->bhij", q[..., a:], k[..., a:]) / math.sqrt(self.phase_dim)
        return amplitude * torch.cos(self.distance_phase(pos, phase.dtype) * phase)

    def modify_logits(
        self, logits: Tensor, q: Tensor, k: Tensor, pos: Positions, layer: int
    ) -> Tensor:
        # [b, h, i, j]: what attention added to its q . k / sqrt(D) (another encoding's bias)
        others = logits - torch.einsum("bhid,bhjd->bhij", q, k) * self.scale
        tapa = in_fp32(lambda q, k: self.scores(q, k, pos), q, k)  # float32 under autocast
        return tapa + others

    def extra_repr(self) -> str:
        return (
            f"amplitude_share={self.amplitude_share:g}, alpha={self.alpha:g}, "
            f"amplitude_dims={self.amplitude_dim}, phase_dims={self.phase_dim}"
        )


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
