"""Hierarchical decomposition: a learned table of ``n`` positions extended to ``n^2``."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from pelab.errors import ConfigError
from pelab.pe.absolute import AdditivePE, Join, TokenScale
from pelab.pe.base import ModelDims, register_pe
from pelab.positions import Positions


@register_pe("hierarchical")
class HierarchicalPE(AdditivePE):
    """Su Jianlin 2020, "层次分解位置编码，让BERT可以处理超长文本" ("Hierarchical decomposition
    position encoding: letting BERT handle ultra-long text"), Scientific Spaces blog,
    https://kexue.fm/archives/7947 (also bert4keras ``PositionEmbedding(hierarchical=...)``).

    From a trained table ``p_1..p_n`` the source builds ``n^2`` position vectors
    ``q_{(i-1)n+j} = alpha u_i + (1 - alpha) u_j`` with ``u_i = (p_i - alpha p_1) / (1 - alpha)``,
    ``i, j in 1..n``, so that ``q_k = p_k`` for ``k <= n``. With 0-based positions
    ``k = i n + j`` (coarse ``i = k // n``, fine ``j = k % n``), ``u_i = (p_i - alpha p_0) /
    (1 - alpha)``; expanding gives ``q_k = p_j + alpha / (1 - alpha) (p_i - p_0)``, the same
    vector, computed in that form so that ``q_k`` is row ``p_k`` bit for bit when ``k < n``.
    ``alpha`` lies in (0, 1) and is not 0.5: at 0.5, ``q_(i,j) = q_(j,i)``.

    Choices the source leaves open (it extends a pretrained BERT table, then fine-tunes): the
    table (``base_len = n`` rows) is trained here from scratch, initialised as ``pe=learned``
    (normal, std ``init_std``). Set ``base_len`` near the longest training sequence, so that
    evaluation positions beyond training are composed from trained rows; the default 32 is about
    the training span of the default tasks (34 tokens). Positions ``>= n^2`` are an error.
    ``token_scale`` and ``join``: ``pelab.pe.absolute.AdditivePE``.
    """

    shift = "absolute"

    def __init__(
        self,
        dims: ModelDims,
        base_len: int = 32,
        alpha: float = 0.4,
        init_std: float = 1.0,
        token_scale: TokenScale = "none",
        join: Join = "add",
    ) -> None:
        super().__init__(dims, token_scale, join)
        if not 0.0 < alpha < 1.0 or alpha == 0.5:
            raise ConfigError(
                f"pe=hierarchical needs 0 < pe.alpha < 1 and pe.alpha != 0.5, got {alpha} "
                f"(at 0.5 positions i*n+j and j*n+i share a vector); the source uses 0.4"
            )
        if base_len < 1:
            raise ConfigError(f"pe.base_len (the table size) must be >= 1, got {base_len}")
        if base_len**2 < dims.max_len:
            raise ConfigError(
                f"pe=hierarchical with pe.base_len={base_len} covers {base_len**2} positions but "
                f"this run feeds sequences of up to {dims.max_len} tokens (its longest "
                f"task.eval_lengths): raise pe.base_len to at least "
                f"{math.isqrt(dims.max_len - 1) + 1}, or shorten task.eval_lengths."
            )
        self.alpha = alpha
        self.table = nn.Parameter(torch.empty(base_len, dims.d_model))
        nn.init.normal_(self.table, std=init_std)

    def position_vectors(self, pos: Positions) -> Tensor:
        n = self.table.shape[0]
        top = int(pos.q.max())
        if top >= n * n:
            raise ConfigError(
                f"pe=hierarchical with pe.base_len={n} covers positions 0..{n * n - 1} but got "
                f"position {top}; raise pe.base_len to at least {math.isqrt(top) + 1}"
            )
        offset = self.alpha / (1 - self.alpha) * (self.table - self.table[0])  # [n, d]
        return self.table[pos.q % n] + offset[pos.q // n]

    def extra_repr(self) -> str:
        return f"base_len={self.table.shape[0]}, alpha={self.alpha}"
