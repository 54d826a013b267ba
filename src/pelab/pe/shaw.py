"""Relative position representations: learned key and value vectors per clipped offset."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims, PositionalEncoding, register_pe
from pelab.positions import Positions


def clipped_offset_index(pos: Positions, behind: int, ahead: int) -> Tensor:
    """Row of a relative table for each pair: ``clip(j - i, -behind, ahead) + behind``.

    Offsets are taken between the explicit positions (``pos.k[j] - pos.q[i]``), so rows run from
    ``0`` (``behind`` or more keys before the query) to ``behind + ahead`` (``ahead`` or more
    keys after it). Returns ``[b|1, i, j]`` long.
    """
    return (-pos.delta()).clamp(-behind, ahead) + behind


def xavier_tables(n_layers: int, rows: int, dim: int) -> Tensor:
    """``[n_layers, rows, dim]``, each layer's ``[rows, dim]`` table Xavier-uniform on its own."""
    return torch.stack([nn.init.xavier_uniform_(torch.empty(rows, dim)) for _ in range(n_layers)])


@register_pe("shaw")
class ShawPE(PositionalEncoding):
    """Shaw, Uszkoreit, Vaswani 2018, "Self-Attention with Relative Position Representations".

    Each pair gets a learned key and value vector for its clipped offset,
    ``a^K_ij = w^K[clip(j - i, k)]`` and ``a^V_ij = w^V[clip(j - i, k)]`` with
    ``clip(x, k) = max(-k, min(k, x))`` (eqs. 3-5)::

        e_ij = q_i . (k_j + a^K_ij) / sqrt(d)    modify_logits adds q_i . a^K_ij / sqrt(d)
        z_i  = sum_j alpha_ij (v_j + a^V_ij)     modify_output adds sum_j alpha_ij a^V_ij

    Choices (the paper leaves the layer question open; tensor2tensor, its code, settles it):

    - Vectors have the head dimension and are shared by all heads (paper, section 3.3).
    - Each layer learns its own tables: tensor2tensor creates them inside every layer's attention
      scope. ``key_table`` and ``value_table`` are ``[n_layers, rows, head_dim]``, initialised
      Xavier-uniform per layer (tensor2tensor's default initialiser, ``uniform_unit_scaling``).
    - ``max_distance`` is ``k`` (default 16, as in the paper's experiments; its Table 3 finds
      every k >= 2 about equal on translation). Offsets beyond ``+-k`` share the vector of
      ``+-k``, so the encoding runs at any length; but that shared vector trains only on
      sequences longer than ``k`` tokens, otherwise it keeps its initial value.
    - Encoder: ``2k + 1`` rows (offsets -k..k). Decoder: ``k + 1`` rows (offsets -k..0): the
      causal mask hides every key after its query, so rows for positive offsets could neither
      change the output nor receive a gradient; leaving them out changes no function.

    Cost: rather than gathering an ``[i, j, d]`` table, the ``rows`` distinct vectors are used
    directly. ``q @ w^K^T`` gives scores ``[b, h, i, rows]``, gathered into ``[b, h, i, j]``; the
    probabilities are summed per row into ``[b, h, i, rows]`` and multiplied by ``w^V``. Nothing
    of size ``i * j * d`` is built, and positions that differ per batch row just work.
    """

    shift = "relative"

    def __init__(self, dims: ModelDims, max_distance: int = 16) -> None:
        super().__init__(dims)
        if isinstance(max_distance, bool) or not isinstance(max_distance, int) or max_distance < 0:
            raise ConfigError(
                f"pe.max_distance (the clipping distance k of pe=shaw) must be an integer >= 0, "
                f"got {max_distance!r}"
            )
        self.max_distance = max_distance
        self.ahead = 0 if dims.causal else max_distance  # the largest j - i with its own row
        rows = max_distance + self.ahead + 1
        self.scale = 1.0 / math.sqrt(dims.head_dim)
        self.key_table = nn.Parameter(xavier_tables(dims.n_layers, rows, dims.head_dim))
        self.value_table = nn.Parameter(xavier_tables(dims.n_layers, rows, dims.head_dim))

    def row_index(self, pos: Positions, like: Tensor) -> Tensor:
        """The table row of every pair, ``[b|1, i, j]`` expanded to ``like``'s ``[b, h, i, j]``."""
        index = pos.memo(
            (id(self), "rows"), lambda: clipped_offset_index(pos, self.max_distance, self.ahead)
        )
        return index[:, None].expand_as(like)

    def modify_logits(
        self, logits: Tensor, q: Tensor, k: Tensor, pos: Positions, layer: int
    ) -> Tensor:
        scores = q @ self.key_table[layer].T  # [b, h, i, rows]: q_i . w^K_r
        return logits + scores.gather(-1, self.row_index(pos, logits)) * self.scale

    def modify_output(self, out: Tensor, probs: Tensor, pos: Positions, layer: int) -> Tensor:
        table = self.value_table[layer]  # [rows, d]
        mass = probs.new_zeros(*probs.shape[:-1], len(table))  # [b, h, i, rows]
        mass = mass.scatter_add(-1, self.row_index(pos, probs), probs)  # sum of alpha_ij per row
        return out + mass @ table

    def extra_repr(self) -> str:
        return f"max_distance={self.max_distance}, rows={self.key_table.shape[1]}"
