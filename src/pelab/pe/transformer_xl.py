"""Transformer-XL relative attention: sinusoids of the distance, projected per layer, plus two
learned biases."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from pelab.errors import ConfigError
from pelab.pe.absolute import sinusoid_table
from pelab.pe.base import ModelDims, PositionalEncoding, register_pe
from pelab.positions import Positions

INIT_STD = 0.02  # the authors' code: every weight and both biases ~ N(0, 0.02)


def rel_shift(scores: Tensor) -> Tensor:
    """Transformer-XL's relative shift (Dai et al. 2019, appendix B), without building
    ``[i, j, d]``.

    ``scores: [..., n, L]`` holds in column ``m`` the score of distance ``n - 1 - m`` (descending
    distances, ``L >= n``). Returns ``[..., n, n]`` with ``out[i, j] = scores[i, n - 1 - i + j]``,
    the score of distance ``i - j``. Appending one zero column makes rows ``L + 1`` long, so in
    the flattened tensor ``out[i, j]`` sits at ``(n - 1) + i L + j``: a plain reshape after
    dropping the first ``n - 1`` entries. Columns that run past a row (``j > i`` when only the
    ``L = n`` distances ``n - 1 .. 0`` are given, as in a decoder) hold other scores.
    """
    n, length = scores.shape[-2:]
    flat = F.pad(scores, (0, 1)).flatten(-2)  # [..., n (L + 1)]
    return flat[..., n - 1 : n - 1 + n * length].unflatten(-1, (n, length))[..., :n]


@register_pe("transformer_xl")
class TransformerXLPE(PositionalEncoding):
    """Transformer-XL (Dai, Yang, Yang, Carbonell, Le, Salakhutdinov 2019, "Transformer-XL:
    Attentive Language Models Beyond a Fixed-Length Context"), section 3.3; also XLNet (Yang et
    al. 2019), which uses it in both directions.

    With ``R_{i-j}`` the sinusoid of the distance (no absolute encoding is added anywhere)::

        logits_ij = [q_i . k_j + u . k_j + q_i . W_R R_{i-j} + v . W_R R_{i-j}] / sqrt(d)
                  = [(q_i + u) . k_j + (q_i + v) . W_R R_{i-j}] / sqrt(d)

    Attention already computes ``q_i . k_j / sqrt(d)``; ``modify_logits`` adds the other three
    terms with the same scale (the authors' code scales all four).

    Choices:

    - ``R`` is ``pelab.pe.absolute.sinusoid_table`` of width ``d_model`` in the ``concat`` layout
      (all sines, then all cosines) as in the authors' code; ``W_R`` is learned, so the layout only
      permutes its columns. Distances are ``pos.q_i - pos.k_j`` (negative for keys after the
      query in an encoder).
    - ``W_R: d_model -> h * d`` is per layer (``W^n_{k,R}`` in the paper's equations); ``u`` and
      ``v`` (``[h, d]`` each) are shared by all layers (no layer index in the paper; the authors'
      default ``untie_r=False``). All ``~ N(0, 0.02)`` as in the authors' code (the paper gives no
      initialisation).
    - Cost: when distances are index differences (positions ``c + 0..n-1`` for queries and keys,
      any offset ``c``, the usual case) the position scores of the ``L`` distinct distances,
      ``[b, h, i, L]``, are computed once and moved into place by ``rel_shift``. A decoder needs
      only ``L = n`` distances ``n-1..0``, an encoder ``L = 2n - 1`` (``n-1..-(n-1)``). Otherwise
      (positions per batch row, randomized, gapped) the distinct distances are listed with
      ``torch.unique`` and each pair's score is gathered. Neither builds ``[i, j, d]``.
    """

    shift = "relative"

    def __init__(self, dims: ModelDims, base: float = 10000.0) -> None:
        super().__init__(dims)
        if dims.d_model % 2:
            raise ConfigError(
                f"pe=transformer_xl embeds distances with sin/cos pairs of width d_model, so it "
                f"needs an even model.net.d_model, got {dims.d_model}"
            )
        if base <= 1:
            raise ConfigError(
                f"pe.base (the sinusoid base of pe=transformer_xl) must be > 1, got {base}"
            )
        h, d = dims.n_heads, dims.head_dim
        self.base = base
        self.scale = 1.0 / math.sqrt(d)
        self.content_bias = nn.Parameter(torch.randn(h, d) * INIT_STD)  # u
        self.position_bias = nn.Parameter(torch.randn(h, d) * INIT_STD)  # v
        self.w_r = nn.Parameter(torch.randn(dims.n_layers, h * d, dims.d_model) * INIT_STD)

    def contiguous_sinusoids(self, n: int, device: torch.device) -> Tensor:
        """``R`` of the distances ``n-1, n-2, ..`` down to 0 (decoder) or ``-(n-1)`` (encoder),
        the columns ``rel_shift`` expects: ``[L, d_model]``."""
        lowest = 0 if self.dims.causal else 1 - n
        distances = torch.arange(n - 1, lowest - 1, -1, device=device)
        return sinusoid_table(distances, self.dims.d_model, self.base, layout="concat")

    def gathered_sinusoids(self, delta: Tensor) -> tuple[Tensor, Tensor]:
        """``R`` of each distinct distance in ``delta: [b|1, i, j]``, ``[L, d_model]``, and the
        column of every pair, ``[b|1, i, j]``."""
        distances, column = torch.unique(delta, return_inverse=True)
        return sinusoid_table(distances, self.dims.d_model, self.base, layout="concat"), column

    def sinusoids(self, pos: Positions, n_q: int, n_k: int) -> tuple[Tensor, Tensor | None]:
        """Per forward pass (shared by the layers): ``R`` and the pair columns, or None when the
        distances are index differences and ``rel_shift`` places the scores."""
        contiguous = (
            n_q == n_k and torch.equal(pos.q, pos.k) and bool((pos.q.diff(dim=-1) == 1).all())
        )
        if contiguous:
            return self.contiguous_sinusoids(n_q, pos.q.device), None
        return self.gathered_sinusoids(pos.delta())

    def position_scores(
        self, query: Tensor, sinusoids: Tensor, column: Tensor | None, layer: int
    ) -> Tensor:
        """``query . W_R R_{i-j}`` as ``[b, h, i, j]`` for ``query: [b, h, i, d]``."""
        relative = rearrange(
            sinusoids.to(self.w_r.dtype) @ self.w_r[layer].T,
            "l (h d) -> h l d",
            h=self.dims.n_heads,
        )  # W_R R for each distance
        scores = query @ relative.transpose(-1, -2)  # [b, h, i, L]
        if column is None:
            return rel_shift(scores)
        b, h, i, _ = scores.shape
        return scores.gather(-1, column[:, None].expand(b, h, i, column.shape[-1]))

    def modify_logits(
        self, logits: Tensor, q: Tensor, k: Tensor, pos: Positions, layer: int
    ) -> Tensor:
        sinusoids, column = pos.memo(id(self), lambda: self.sinusoids(pos, q.shape[2], k.shape[2]))
        content = torch.einsum("hd,bhjd->bhj", self.content_bias, k)[:, :, None]  # [b, h, 1, j]
        query = q + self.position_bias[:, None]  # (q_i + v): [b, h, i, d]
        position = self.position_scores(query, sinusoids, column, layer)
        return logits + (content + position) * self.scale

    def extra_repr(self) -> str:
        return f"base={self.base:g}"
