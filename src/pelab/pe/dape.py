"""DAPE: an MLP over each query-key pair's attention scores and position bias, across heads."""

from __future__ import annotations

from typing import Literal

import torch
from einops import rearrange
from torch import Tensor, nn

from pelab.errors import ConfigError
from pelab.pe.base import PE_REGISTRY, ModelDims, PositionalEncoding, in_fp32, register_pe
from pelab.positions import Positions

DapeBase = Literal["kerple", "alibi", "fire", "t5_bias"]  # the content-free biases it adapts


@register_pe("dape")
class DapePE(PositionalEncoding):
    """DAPE (Zheng, Gao, Shi, Xiong, Sun, Li, Zhang, Jiang, Li 2024, "DAPE: Data-Adaptive
    Positional Encoding for Length Extrapolation"), eq. 5::

        A = Q K^T / sqrt(d) + B + f(Q K^T / sqrt(d), B)

    ``B`` is a base encoding's content-free bias (``base``: Kerple, the paper's headline
    DAPE-Kerple, ALiBi, FIRE or T5), and ``f`` an MLP applied to each query-key pair on its
    ``2h`` features, the ``h`` heads' scores then the ``h`` heads' biases, giving ``h`` values:
    ``Linear(2h, width) -> LeakyReLU -> Linear(width, h)`` with biases, one MLP per layer,
    PyTorch's default initialisation, ``width = 32`` (all as the released code,
    chuanyang-Zheng/DAPE, ``ParallelKerpleLog_C``). The pair's scores decide how much of the
    bias applies, and the heads share what they see. ``f`` reads the pair's own entries only, so
    causality holds; as in the released code it runs before the causal mask. The scores are
    recovered as ``logits - B`` from the logits attention hands over (``modify_logits``), so
    another encoding's bias in them would count as scores (``fox`` refuses DAPE as its base). The
    shift class, causal-only flag and cache support are the base's.
    """

    position_dims = 1
    shift = "relative"  # of the default base; an instance takes its base's

    def __init__(self, dims: ModelDims, base: DapeBase = "kerple", width: int = 32) -> None:
        super().__init__(dims)
        if width < 1:
            raise ConfigError(f"pe.width (the MLP's hidden size) must be >= 1, got {width}")
        self.base = PE_REGISTRY[base](dims)
        self.shift, self.causal_only = self.base.shift, self.base.causal_only
        self.supports_kv_cache = self.base.supports_kv_cache
        self.prefix_only = self.base.prefix_only
        self.members_at_once = self.base.members_at_once
        h = dims.n_heads
        self.mlps = nn.ModuleList(
            nn.Sequential(nn.Linear(2 * h, width), nn.LeakyReLU(), nn.Linear(width, h))
            for _ in range(dims.n_layers)
        )

    def logit_bias(self, pos: Positions, layer: int) -> Tensor | None:
        return self.base.logit_bias(pos, layer)

    def modify_logits(
        self, logits: Tensor, q: Tensor, k: Tensor, pos: Positions, layer: int
    ) -> Tensor:
        bias = self.base.logit_bias(pos, layer).expand_as(logits)  # [b, h, i, j]
        features = torch.cat((logits - bias, bias), dim=1)  # [b, 2h, i, j]: scores, then B
        # [b, i, j, h], in float32 under autocast too: bf16 inputs would merge the biases of
        # neighbouring distances (Kerple's from about 50 on)
        adapted = in_fp32(self.mlps[layer], rearrange(features, "b c i j -> b i j c"))
        return logits + rearrange(adapted, "b i j h -> b h i j")
