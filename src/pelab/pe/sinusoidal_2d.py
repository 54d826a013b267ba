"""2-D sinusoidal encoding: the 1-D sinusoid of the row on half the channels, of the column on
the other half."""

from __future__ import annotations

import torch
from torch import Tensor

from pelab.errors import ConfigError
from pelab.pe.absolute import AdditivePE, Join, SinusoidLayout, TokenScale, sinusoid_table
from pelab.pe.base import ModelDims, register_pe
from pelab.positions import Positions


@register_pe("sinusoidal_2d")
class Sinusoidal2dPE(AdditivePE):
    """Fixed 2-D sinusoids added to the token embeddings, for (row, col) positions.

    ``PE(r, c) = [S(r), S(c)]`` with ``S`` the 1-D sinusoid of Vaswani et al. 2017 over
    ``d_model / 2`` channels (``pelab.pe.absolute.sinusoid_table``, either layout), so each axis
    uses the frequencies ``base^(-4i/d_model)``: the row on the first half of the channels, the
    column on the second. This is the 2-D encoding of Parmar et al. 2018 ("Image Transformer":
    half the dimensions for the row, half for the column) and of Wang & Liu 2019 ("Translating
    Math Formula Images to LaTeX Sequences Using Deep Neural Networks with Sequence-level
    Training"; DETR, Carion et al. 2020, likewise), who put the horizontal axis first: a fixed
    permutation of channels, which the learned projections absorb. Defined at every coordinate,
    so it runs on grids of any size. No parameters (but ``W`` of ``join=concat``).
    ``token_scale`` and ``join``: ``pelab.pe.absolute.AdditivePE``.
    """

    position_dims = 2
    shift = "absolute"  # in each axis

    def __init__(
        self,
        dims: ModelDims,
        base: float = 10000.0,
        layout: SinusoidLayout = "interleaved",
        token_scale: TokenScale = "none",
        join: Join = "add",
    ) -> None:
        super().__init__(dims, token_scale, join)
        if dims.d_model % 4:
            raise ConfigError(
                f"pe={self.pe_name} gives each axis an even half of the channels, so "
                f"model.net.d_model must be a multiple of 4, got {dims.d_model}"
            )
        self.base, self.layout = base, layout

    def position_vectors(self, pos: Positions) -> Tensor:
        """``[b|1, n, d_model]``: the row sinusoid, then the column sinusoid."""
        pos.require(2, f"pe={self.pe_name}")
        half = self.dims.d_model // 2
        axes = [sinusoid_table(pos.q[..., a], half, self.base, self.layout) for a in (0, 1)]
        return torch.cat(axes, dim=-1)
