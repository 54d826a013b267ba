"""Scaled sinusoidal encoding: the fixed sinusoid times one learned scalar."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from pelab.pe.absolute import Join, SinusoidalPE, SinusoidLayout, TokenScale
from pelab.pe.base import ModelDims, register_pe
from pelab.positions import Positions


@register_pe("scaled_sinusoidal")
class ScaledSinusoidalPE(SinusoidalPE):
    """``x_p += g * PE(p)``: Vaswani's sinusoid ``PE`` (see ``sinusoid_table``; ``base`` and
    ``layout`` as in ``pe=sinusoidal``) times a single trained scalar ``g`` shared by all
    positions and dimensions. "ScaledSinu" of Hua, Dai, Liu and Le 2022, "Transformer Quality in
    Linear Time" (FLASH), their absolute-position baseline; the scalar lets training choose how
    loud the position signal is against the token embeddings.

    Initial value: the FLASH paper gives none that we could verify. ``init_scale=None`` starts
    ``g`` at ``d_model^-0.5``, as Google's GAU code (google-research/retvec,
    ``ScaledSinusoidalPositionalEmbedding``) and x-transformers (``ScaledSinusoidalEmbedding``)
    do; ports in the lucidrains FLASH lineage (``ScaledSinuEmbedding``) start at 1.0, which
    ``init_scale=1.0`` reproduces. Defined at every position, like the plain sinusoid.
    ``token_scale`` and ``join``: ``pelab.pe.absolute.AdditivePE``.
    """

    shift = "absolute"

    def __init__(
        self,
        dims: ModelDims,
        base: float = 10000.0,
        layout: SinusoidLayout = "interleaved",
        init_scale: float | None = None,
        token_scale: TokenScale = "none",
        join: Join = "add",
    ) -> None:
        super().__init__(dims, base, layout, token_scale, join)
        init = dims.d_model**-0.5 if init_scale is None else init_scale
        self.scale = nn.Parameter(torch.tensor(float(init)))

    def position_vectors(self, pos: Positions) -> Tensor:
        return self.scale * super().position_vectors(pos)
