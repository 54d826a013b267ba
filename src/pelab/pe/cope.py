"""Contextual position encoding: positions that count only the tokens the model chooses."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims, PositionalEncoding, register_pe
from pelab.positions import Positions


@register_pe("cope")
class CoPE(PositionalEncoding):
    """CoPE (Golovneva, Wang, Weston, Sukhbaatar 2024, "Contextual Position Encoding: Learning to
    Count What's Important").

    Query ``i`` decides for every key ``t`` whether it counts, with a gate, and the position of
    key ``j`` is the number of counted keys from ``j`` up to ``i`` (section 3)::

        g_ij = sigmoid(q_i . k_j)
        p_ij = sum_{t=j..i} g_it                       (fractional, in [0, i - j + 1])
        z_ij = w q_i . e[ceil p_ij] + (1 - w) q_i . e[floor p_ij],   w = p_ij - floor p_ij
        logits_ij = q_i . k_j / sqrt(d) + z_ij

    Choices:

    - Gates use the raw product ``q_i . k_j`` as the paper's equation writes it (its listed code
      takes the sigmoid of the already scaled logits, ``q . k / sqrt(d)``; we follow the
      equation). Gates of keys after the query are zero: future keys count for nothing.
    - ``z_ij`` is added to the scaled logits unscaled, as in the paper's code (``attn_logits +=
      cope(query, attn_logits)`` after the division by ``sqrt(d)``).
    - Positions are clamped to ``npos_max - 1`` (paper's ``p_max``; default 64), so the table has
      ``npos_max`` rows and the encoding runs at any length; beyond it far keys share ``e[p_max]``.
    - Each head computes its own gates and positions; the embeddings ``e`` (``head_dim`` each)
      are shared by the heads of a layer and each layer has its own, as in the paper's code (one
      CoPE module per attention layer, applied to the queries of every head). They start at zero,
      as there, so the model starts as NoPE.
    - Efficient form (paper, section 3): ``q @ E^T`` gives ``[b, h, i, npos]`` scores once; the
      floor and ceil scores are gathered from it, never building ``[i, j, d]``.
    - Bidirectional encoder (``model=encoder``; the paper is causal only): a documented symmetric
      variant. Keys at or before the query use the paper's ``p_ij``; a key after it counts the
      other way, ``p_ij = sum_{t=i..j} g_it``, and looks up a second table ``e_after`` (rows
      ``npos_max..2 npos_max - 1``), so the two directions stay distinguishable.

    Positions given to the model are not used at all: CoPE is invariant to shifting them.
    """

    position_dims = None
    shift = "relative"  # reads no positions

    def __init__(self, dims: ModelDims, npos_max: int = 64) -> None:
        super().__init__(dims)
        if isinstance(npos_max, bool) or not isinstance(npos_max, int) or npos_max < 1:
            raise ConfigError(
                f"pe.npos_max (the number of contextual positions of pe=cope) must be an integer "
                f">= 1, got {npos_max!r}"
            )
        self.npos_max = npos_max
        rows = npos_max if dims.causal else 2 * npos_max  # encoder: a second table for j > i
        self.embeddings = nn.Parameter(torch.zeros(dims.n_layers, rows, dims.head_dim))

    def contextual_positions(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """Clamped positions ``p_ij: [b, h, i, j]`` and the first table row of each pair's
        direction, ``[i, j]`` (0 for keys at or before the query, ``npos_max`` after it)."""
        n_q, n_k = q.shape[2], k.shape[2]
        # [b, h, i, j], raw q_i . k_j; counts in float32 (bf16 loses fractions of a sum past 2^8)
        gates = torch.sigmoid((q @ k.transpose(-1, -2)).float())
        ones = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device)
        before = ones.tril(n_k - n_q)  # [i, j]: key j at or before query i, as the causal mask
        # sum_{t=j..i} g_it: for each j, the sum over t >= j of the gates not after the query
        positions = gates.masked_fill(~before, 0).flip(-1).cumsum(-1).flip(-1)
        first_row = torch.zeros(n_q, n_k, dtype=torch.long, device=q.device)
        if not self.dims.causal:  # keys after the query: sum_{t=i..j} g_it, a forward sum
            after = gates.masked_fill(~ones.triu(n_k - n_q), 0).cumsum(-1)
            positions = torch.where(before, positions, after)
            first_row = first_row.masked_fill(~before, self.npos_max)
        return positions.clamp(max=self.npos_max - 1), first_row

    def modify_logits(
        self, logits: Tensor, q: Tensor, k: Tensor, pos: Positions, layer: int
    ) -> Tensor:
        positions, first_row = self.contextual_positions(q, k)
        scores = q @ self.embeddings[layer].T  # [b, h, i, rows]: q_i . e[p] for integer p
        floor = positions.floor()
        weight = positions - floor  # gradients reach the gates through the interpolation weight
        below = scores.gather(-1, floor.long() + first_row)
        above = scores.gather(-1, positions.ceil().long() + first_row)
        return logits + (weight * above + (1 - weight) * below).to(logits.dtype)

    def extra_repr(self) -> str:
        return f"npos_max={self.npos_max}, rows={self.embeddings.shape[1]}"
