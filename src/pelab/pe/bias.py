"""Attention-bias encodings: a content-free matrix added to the attention logits."""

from __future__ import annotations

import math

import torch
from einops import rearrange
from torch import Tensor, nn

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims, PositionalEncoding, register_pe
from pelab.positions import Positions


def alibi_slopes(n_heads: int) -> Tensor:
    """Head slopes of ALiBi (Press et al. 2022, section 3).

    For ``n`` a power of two: the geometric sequence starting at and with ratio ``2^(-8/n)``
    (8 heads: 1/2, 1/4, ..., 1/256). Otherwise: the slopes of the closest power of two
    ``p < n``, then every other slope of ``2p`` heads until there are ``n``.
    """
    if n_heads < 1:
        raise ConfigError(f"ALiBi needs at least one head, got {n_heads}")

    def geometric(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    p = 2 ** math.floor(math.log2(n_heads))
    slopes = geometric(p) + geometric(2 * p)[0::2][: n_heads - p]
    return torch.tensor(slopes, dtype=torch.float32)


@register_pe("alibi")
class AlibiPE(PositionalEncoding):
    """ALiBi (Press et al. 2022, "Train Short, Test Long"): ``logit_ij += -m_h * |i - j|``.

    The paper is causal, where ``|i - j| = i - j`` on every unmasked pair. For an encoder we use
    the symmetric ``-m_h |i - j|`` (the same slope for both directions), one documented choice
    among several in the literature. No parameters.
    """

    shift = "relative"

    def __init__(self, dims: ModelDims) -> None:
        super().__init__(dims)
        self.register_buffer("slopes", alibi_slopes(dims.n_heads), persistent=False)

    def logit_bias(self, pos: Positions, layer: int) -> Tensor:
        return pos.memo(id(self), lambda: self._bias(pos))

    def _bias(self, pos: Positions) -> Tensor:
        distance = pos.delta().abs().float()  # [b|1, i, j]
        return -self.slopes[:, None, None] * distance[:, None]  # [b|1, h, i, j]


def t5_bucket(
    relative_position: Tensor, bidirectional: bool, num_buckets: int, max_distance: int
) -> Tensor:
    """T5's relative-position buckets (Raffel et al. 2020), for ``relative_position = j - i``.

    Half of the buckets (per direction when bidirectional) hold exact distances 0..max_exact-1;
    the rest grow logarithmically up to ``max_distance``, beyond which all distances share the
    last bucket. Causal: keys after the query (j > i) fall into bucket 0, and the mask hides them.
    """
    n = -relative_position
    bucket = torch.zeros_like(n)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (n < 0).long() * num_buckets
        n = n.abs()
    else:
        n = n.clamp(min=0)
    max_exact = num_buckets // 2
    log_ratio = torch.log(n.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (log_ratio * (num_buckets - max_exact)).long()
    large = large.clamp(max=num_buckets - 1)
    return bucket + torch.where(n < max_exact, n, large)


@register_pe("t5_bias")
class T5BiasPE(PositionalEncoding):
    """T5 relative bias (Raffel et al. 2020): a learned scalar per head and distance bucket,
    ``logit_ij += b_h[bucket(j - i)]``, shared by all layers as in T5. The table starts at zero
    (the model starts as NoPE and learns its biases)."""

    shift = "relative"

    def __init__(self, dims: ModelDims, num_buckets: int = 32, max_distance: int = 128) -> None:
        super().__init__(dims)
        bidirectional = not dims.causal
        per_direction = num_buckets // 2 if bidirectional else num_buckets
        if per_direction < 2 or max_distance <= per_direction // 2:
            raise ConfigError(
                f"pe=t5_bias needs num_buckets >= {4 if bidirectional else 2} and max_distance > "
                f"the exact range ({per_direction // 2}); got num_buckets={num_buckets}, "
                f"max_distance={max_distance}"
            )
        self.bidirectional = bidirectional
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.bias = nn.Embedding(num_buckets, dims.n_heads)
        nn.init.zeros_(self.bias.weight)

    def logit_bias(self, pos: Positions, layer: int) -> Tensor:
        return pos.memo(id(self), lambda: self._bias(pos))

    def _bias(self, pos: Positions) -> Tensor:
        # the buckets do not read the weights: a stack's members share them (memoised apart)
        buckets = pos.memo(
            (id(self), "buckets"),
            lambda: t5_bucket(
                -pos.delta(), self.bidirectional, self.num_buckets, self.max_distance
            ),
        )
        return rearrange(self.bias(buckets), "b i j h -> b h i j")

    def _buckets(self, pos: Positions) -> Tensor:
        return t5_bucket(-pos.delta(), self.bidirectional, self.num_buckets, self.max_distance)
