"""FIRE: a learned function of the log-scaled distance, normalised by the query position."""

from __future__ import annotations

from functools import partial

import torch
from einops import rearrange
from torch import Tensor, nn

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims, PositionalEncoding, in_fp32, register_pe
from pelab.positions import Positions


@register_pe("fire")
class FirePE(PositionalEncoding):
    """FIRE (Li, You, Guruganesh, Ainslie, Ontanon, Zaheer, Sanghai, Yang, Kumar & Bhojanapalli
    2023, "Functional Interpolation for Relative Positions Improves Long Context Transformers"):

        ``logit_ij += f_theta( psi(i - j) / psi(max(L, i)) )``,   ``psi(x) = log(c x + 1)``

    ``f_theta`` is an MLP ``1 -> mlp_width -> n_heads`` with a ReLU (one output per head), ``c``
    a learned scale of the log transform and ``L`` a learned threshold, all three per layer.
    Dividing by ``psi(max(L, i))`` maps every distance a causal query ``i`` can see into
    ``[0, 1]`` ("progressive interpolation"), so longer sequences reuse the input range seen in
    training; ``L`` keeps short-range distances from being over-stretched.

    Choices, as in the public reference implementation (mcleish7/arithmetic, ``FIRE``) unless
    noted:

    - ``c`` enters as ``|c|`` (init 0.1); ``L = |threshold_scale| * threshold_init``, with the
      multiplier learned from 1 and ``threshold_init`` fixed (default 512). The absolute values
      keep both positive whatever the optimizer does, the multiplier gives ``L`` a usable
      learning rate, and ``1e-6`` is added to the denominator. The MLP has PyTorch's default
      initialisation.
    - "i" is the query's absolute position ``pos.q`` (the paper's 0-based index), so FIRE is NOT
      shift-invariant: shifting all positions by ``s`` leaves the bias unchanged only while all
      positions stay ``<= L`` (then the normaliser is the constant ``psi(L)``).
    - Bidirectional (encoder) use, our extension: the distance is ``|i - j|`` and the normaliser
      ``psi(max(L, i, j))``. On every pair a decoder sees (``j <= i``) this is exactly the paper's
      formula, so decoders need no separate case; in an encoder the bias is symmetric in
      ``(i, j)`` and the MLP input stays in ``[0, 1]`` for keys after the query too.
    - One ``f_theta, c, L`` per layer, as in the paper's main models (each layer has its own
      FIRE; it reports layer-sharing as a cheaper variant of similar quality). ``logit_bias``
      receives the layer, so FIRE stays on the fused kernel; each layer's bias is computed once
      per forward pass.
    """

    shift = "relative_below_threshold"

    eps = 1e-6  # keeps the normaliser away from 0 when c or L reach 0

    def __init__(
        self,
        dims: ModelDims,
        mlp_width: int = 32,
        c_init: float = 0.1,
        threshold_init: float = 512.0,
    ) -> None:
        super().__init__(dims)
        for name, value in (
            ("mlp_width", mlp_width),
            ("c_init", c_init),
            ("threshold_init", threshold_init),
        ):
            if value <= 0:
                raise ConfigError(f"pe=fire needs pe.{name} > 0, got {value}")
        self.mlp = nn.ModuleList(  # f_theta of each layer
            nn.Sequential(nn.Linear(1, mlp_width), nn.ReLU(), nn.Linear(mlp_width, dims.n_heads))
            for _ in range(dims.n_layers)
        )
        self.c = nn.Parameter(torch.full((dims.n_layers,), float(c_init)))  # [l]
        self.threshold_scale = nn.Parameter(torch.ones(dims.n_layers))  # [l]
        self.register_buffer("threshold_init", torch.tensor(float(threshold_init)))

    @property
    def threshold(self) -> Tensor:
        """The learned threshold ``L`` of each layer, ``[l]``."""
        return self.threshold_scale.abs() * self.threshold_init

    def psi(self, x: Tensor, layer: int) -> Tensor:
        return torch.log1p(self.c[layer].abs() * x)

    def logit_bias(self, pos: Positions, layer: int) -> Tensor:
        # in float32 under autocast too: the MLP's bf16 inputs and outputs would merge the biases
        # of neighbouring distances from about 20 on (tests/pe/test_fp32_under_autocast.py)
        bias = partial(self._bias, layer=layer)
        dtype = self.c.dtype  # float32, or a numerical check's float64
        return pos.memo((id(self), layer), lambda: in_fp32(bias, pos.q.to(dtype), pos.k.to(dtype)))

    def _bias(self, q: Tensor, k: Tensor, layer: int) -> Tensor:
        """The bias ``[b|1, h, i, j]`` of float32 positions ``q: [b|1, i]`` and ``k: [b|1, j]``."""
        q, k = q[..., :, None], k[..., None, :]  # [b|1, i, 1], [b|1, 1, j]
        # max(L, i, j): [b|1, i, j]
        later = torch.maximum(torch.maximum(q, k), self.threshold[layer])
        # [b|1, i, j], in [0, 1] for positions >= 0
        x = self.psi((q - k).abs(), layer) / (self.psi(later, layer) + self.eps)
        return rearrange(self.mlp[layer](x[..., None]), "b i j h -> b h i j")
