"""DeBERTa's disentangled attention: content-to-position and position-to-content terms over
(log-)bucketed relative distances."""

from __future__ import annotations

import math
from typing import Literal

import torch
from einops import rearrange
from torch import Tensor, nn

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims, PositionalEncoding, register_pe
from pelab.positions import Positions

INIT_STD = 0.02  # the authors' code: embeddings and projections ~ N(0, initializer_range=0.02)


P2cConvention = Literal["paper", "reference"]  # pe.p2c


def log_bucket(relative: Tensor, buckets: int, max_distance: int) -> Tensor:
    """DeBERTa-v2's log buckets of relative distances (``make_log_bucket_position``).

    With ``mid = buckets // 2``, distances ``|r| <= mid`` keep their value; farther ones become
    ``sign(r) * (mid + ceil((mid - 1) * log(|r| / mid) / log((max_distance - 1) / mid)))``, so
    ``|r| = max_distance - 1`` lands on ``+-(buckets - 1)`` and larger distances keep growing
    logarithmically (the table index clips them). Odd: ``bucket(-r) = -bucket(r)``.
    ``buckets == 0`` turns bucketing off (the identity). Computed in float64 as the authors'
    numpy code, so ``ceil`` gives the same buckets.
    """
    if buckets == 0:
        return relative
    mid = buckets // 2
    distance = relative.abs().double()
    ratio = torch.log(distance.clamp(min=mid) / mid) / math.log((max_distance - 1) / mid)
    far = mid + torch.ceil(ratio * (mid - 1))
    return torch.where(distance <= mid, relative, relative.sign() * far.long())


@register_pe("deberta")
class DebertaPE(PositionalEncoding):
    """He, Liu, Gao, Chen 2021, "DeBERTa: Decoding-enhanced BERT with Disentangled Attention"
    (ICLR 2021), section 3.1, eqs. 2-4.

    Relative embeddings ``P: [2k, d_model]`` (shared by all layers, as in the paper) are projected
    per layer into ``Q_r = P W_{q,r}`` and ``K_r = P W_{k,r}`` (split into heads). With content
    ``q_i``, ``k_j`` and the table row ``delta(i, j) = clip(bucket(i - j) + k, 0, 2k - 1)``::

        A_ij = q_i . k_j  +  q_i . K_r[delta(i, j)]  +  k_j . Q_r[delta(j, i)]
               (c2c)          (c2p)                       (p2c)
        logits_ij = A_ij / sqrt(3 d)

    Attention hands ``modify_logits`` ``q_i . k_j / sqrt(d)``, so it returns
    ``(logits * sqrt(d) + c2p + p2c) / sqrt(3 d)``.

    Choices:

    - Buckets: ``position_buckets > 0`` uses DeBERTa-v2's log buckets (``log_bucket``), exact up
      to ``position_buckets // 2`` and logarithmic up to ``max_relative_positions``; then
      ``k = position_buckets``. ``position_buckets: 0`` is the paper's plain clipping with
      ``k = max_relative_positions``. The clip of ``delta`` is the paper's eq. 3: row ``0`` holds
      every ``i - j <= -k``, row ``2k - 1`` every ``i - j >= k - 1`` (with log buckets only
      distances beyond ``max_relative_positions`` reach ``+-k``).
    - ``W_{q,r}`` and ``W_{k,r}`` (``[n_layers, d_model, d_model]``, no bias, as in eq. 4) are
      separate from the content projections, as in the paper and DeBERTa v1. DeBERTa-v2's
      ``share_att_key`` (reusing the content projections) is not offered: the content weights
      belong to the attention module and no hook receives them. v2's LayerNorm of ``P`` is left
      out (not in the paper). All ``~ N(0, 0.02)`` as in the authors' code.
    - Decoders: the paper's model is an encoder; a causal mask applied after this hook keeps every
      term of ``j <= i`` and hides the rest, so the same formula runs in a decoder (c2p then reads
      rows ``>= k``, p2c rows ``<= k``).
    - ``p2c``: ``paper`` (default) reads ``Q_r[delta(j, i)]`` as eq. 4 writes it; ``reference``
      reads ``Q_r[delta(i, j)]``, the mirror image, which is what HF transformers' and
      microsoft/DeBERTa's code compute (their ``p2c_pos`` is built from ``-(i - j)`` and then
      gathered over the keys and transposed, which flips the sign back). Take ``reference`` to
      compare with a model trained by that code.
    - Cost: as in the paper, ``q @ K_r^T`` gives ``[b, h, i, 2k]`` and is gathered by ``delta``
      into ``[b, h, i, j]`` (likewise ``k @ Q_r^T``); nothing of size ``i * j * d`` is built.
    """

    shift = "relative"

    def __init__(
        self,
        dims: ModelDims,
        position_buckets: int = 32,
        max_relative_positions: int = 64,
        p2c: P2cConvention = "paper",
    ) -> None:
        super().__init__(dims)
        self.p2c = p2c
        for name, value in (
            ("position_buckets", position_buckets),
            ("max_relative_positions", max_relative_positions),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(
                    f"pe.{name} of pe=deberta must be an integer >= 0, got {value!r}"
                )
        if position_buckets and (position_buckets < 4 or position_buckets % 2):
            raise ConfigError(
                f"pe.position_buckets of pe=deberta must be 0 (no log buckets) or an even "
                f"integer >= 4, got {position_buckets}"
            )
        if position_buckets and max_relative_positions < position_buckets:
            raise ConfigError(
                f"pe.max_relative_positions={max_relative_positions} must be >= "
                f"pe.position_buckets={position_buckets}: the log buckets compress distances "
                f"{position_buckets // 2}..max_relative_positions - 1 into "
                f"{position_buckets // 2} buckets"
            )
        if not position_buckets and max_relative_positions < 1:
            raise ConfigError(
                "pe.max_relative_positions (the clipping distance k of pe=deberta with "
                "position_buckets: 0) must be >= 1, got 0"
            )
        self.position_buckets = position_buckets
        self.max_relative_positions = max_relative_positions
        self.span = position_buckets or max_relative_positions  # k
        d_model = dims.d_model
        self.scale = 1.0 / math.sqrt(3 * dims.head_dim)
        self.rel_embeddings = nn.Parameter(torch.randn(2 * self.span, d_model) * INIT_STD)  # P
        self.w_q_r = nn.Parameter(torch.randn(dims.n_layers, d_model, d_model) * INIT_STD)
        self.w_k_r = nn.Parameter(torch.randn(dims.n_layers, d_model, d_model) * INIT_STD)

    def rows(self, pos: Positions) -> tuple[Tensor, Tensor]:
        """Table rows ``delta(i, j)`` for c2p and ``delta(j, i)`` for p2c (``delta(i, j)`` with
        ``p2c: reference``), each ``[b|1, i, j]``."""
        bucket = log_bucket(pos.delta(), self.position_buckets, self.max_relative_positions)
        top = 2 * self.span - 1
        c2p = (bucket + self.span).clamp(0, top)
        return c2p, c2p if self.p2c == "reference" else (self.span - bucket).clamp(0, top)

    def project(self, weight: Tensor, like: Tensor) -> Tensor:
        """``P W`` split into heads: ``[h, 2k, d]``."""
        projected = (self.rel_embeddings @ weight.T).to(like.dtype)
        return rearrange(projected, "r (h d) -> h r d", h=self.dims.n_heads)

    def modify_logits(
        self, logits: Tensor, q: Tensor, k: Tensor, pos: Positions, layer: int
    ) -> Tensor:
        c2p_rows, p2c_rows = pos.memo((id(self), "rows"), lambda: self.rows(pos))
        b, h, i, j = logits.shape
        k_r = self.project(self.w_k_r[layer], q)  # [h, 2k, d]
        q_r = self.project(self.w_q_r[layer], q)
        c2p = (q @ k_r.transpose(-1, -2)).gather(  # [b, h, i, 2k] -> [b, h, i, j]
            -1, c2p_rows[:, None].expand(b, h, i, j)
        )
        p2c = (k @ q_r.transpose(-1, -2)).gather(  # [b, h, j, 2k] -> [b, h, j, i]
            -1, p2c_rows.transpose(-1, -2)[:, None].expand(b, h, j, i)
        )
        content = logits * math.sqrt(self.dims.head_dim)  # undo attention's 1/sqrt(d)
        return (content + c2p + p2c.transpose(-1, -2)) * self.scale

    def extra_repr(self) -> str:
        return (
            f"position_buckets={self.position_buckets}, "
            f"max_relative_positions={self.max_relative_positions}, rows={2 * self.span}"
        )
