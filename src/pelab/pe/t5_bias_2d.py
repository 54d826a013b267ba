"""2-D T5 bias: a learned, bucketed bias per axis offset, summed."""

from __future__ import annotations

from einops import rearrange
from torch import Tensor, nn

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims, PositionalEncoding, register_pe
from pelab.pe.bias import t5_bucket
from pelab.positions import Positions


@register_pe("t5_bias_2d")
class T5Bias2dPE(PositionalEncoding):
    """``logit_ij += b^row_h[bucket(r_j - r_i)] + b^col_h[bucket(c_j - c_i)]`` for (row, col)
    positions: the "cross" method of Wu et al. 2021 ("Rethinking and Improving Relative
    Position Encoding for Vision Transformer", iRPE, bias mode: one bucketed table per axis,
    summed) with T5's buckets (Raffel et al. 2020; ``pelab.pe.bias.t5_bucket``).

    Buckets are bidirectional on both axes, in a decoder too: causality follows the sequence
    order, and a key earlier in the sequence may lie below or to the right of its query (the
    previous row's later columns). So ``num_buckets`` splits into ``num_buckets / 2`` per
    direction, half of them exact offsets, the rest log-spaced up to ``max_distance``. The
    tables start at zero (the model starts as NoPE) and are shared by all layers, as in T5.
    Defined for every offset, so it runs on grids of any size; offsets beyond ``max_distance``
    share the last bucket of their direction.
    """

    position_dims = 2
    shift = "relative"  # in each axis

    def __init__(self, dims: ModelDims, num_buckets: int = 32, max_distance: int = 128) -> None:
        super().__init__(dims)
        per_direction = num_buckets // 2
        if per_direction < 2 or max_distance <= per_direction // 2:
            raise ConfigError(
                f"pe={self.pe_name} needs num_buckets >= 4 and max_distance > the exact range "
                f"({per_direction // 2}); got num_buckets={num_buckets}, "
                f"max_distance={max_distance}"
            )
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.row_bias = nn.Embedding(num_buckets, dims.n_heads)
        self.col_bias = nn.Embedding(num_buckets, dims.n_heads)
        nn.init.zeros_(self.row_bias.weight)
        nn.init.zeros_(self.col_bias.weight)

    def logit_bias(self, pos: Positions, layer: int) -> Tensor:
        return pos.memo(id(self), lambda: self._bias(pos))

    def _bias(self, pos: Positions) -> Tensor:
        pos.require(2, f"pe={self.pe_name}")
        # key minus query per axis, [b|1, i, j, 2] -> bucket ids of the same shape
        buckets = t5_bucket(-pos.delta(), True, self.num_buckets, self.max_distance)
        bias = self.row_bias(buckets[..., 0]) + self.col_bias(buckets[..., 1])  # [b|1, i, j, h]
        return rearrange(bias, "b i j h -> b h i j")
