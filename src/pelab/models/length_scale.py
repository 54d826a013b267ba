"""Length-scaled attention (``model.net.attn_scale``): the queries grow with the log of the
number of keys each one attends to, with every encoding, on both kernels and with the cache.

- ``none``: ``softmax(q·k/√d + B)``.
- ``logn``: fixed, ``q <- q · log n / log L`` (Chiang & Cholak 2022, "Overcoming a Theoretical
  Limitation of Self-Attention"; Su 2021's entropy-invariant scaling ``log_L n``), ``n`` the
  keys the query sees (``i + 1`` for query ``i`` of a decoder, the sequence length in an
  encoder) and ``L`` the longest training sequence: 1 at ``n = L``.
- ``ssmax``: Scalable-Softmax (Nakanishi 2025, arXiv 2501.19399), ``softmax((s_h log n) z)``
  with ``s_h`` learned per layer and head. The paper leaves ``s`` learned from an unstated start
  (its Fig. 1 shows ``s = 0.43``); pelab starts at ``s_h = 1 / log L``, which is ``logn`` at
  initialisation.

Both scale the queries, as Llama 4 implements SSMax: the content part ``q·k`` of the logits
grows with ``n``, while an encoding's additive bias (ALiBi, T5, FoX) keeps its size. Attention
applies the scale after ``transform_qk``, so the cached keys stay as they are.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn

from pelab.models.stacked import Stacked

AttnScale = Literal["none", "logn", "ssmax"]  # model.net.attn_scale


def keys_seen(i: int, j: int, causal: bool, device: torch.device) -> Tensor:
    """``[i]``: how many of the ``j`` keys each of the last ``i`` queries attends to."""
    if not causal:
        return torch.full((i,), float(j), device=device)
    return torch.arange(j - i + 1, j + 1, device=device, dtype=torch.float32)


class LengthScale(Stacked):
    """``q: [K b, h, i, d]`` -> ``q · c(n)``, ``c = log n / log L`` (``logn``) or
    ``s_h log n`` (``ssmax``, ``s: [K, h]`` learned, one row per member)."""

    def __init__(self, mode: AttnScale, n_heads: int, train_len: int) -> None:
        super().__init__()
        self.mode = mode
        self.log_train_len = math.log(max(train_len, 2))
        self.s = None
        if mode == "ssmax":
            self.s = nn.Parameter(torch.full((1, n_heads), 1.0 / self.log_train_len))

    def forward(self, q: Tensor, n_keys: int, causal: bool) -> Tensor:
        if self.mode == "none":
            return q
        log_n = keys_seen(q.shape[2], n_keys, causal, q.device).log()  # [i]
        if self.mode == "logn":
            return q * (log_n / self.log_train_len)[:, None].to(q.dtype)
        s = self.stacked("s")  # [K, h]
        k = s.shape[0]
        scale = s[:, None, :, None, None] * log_n[:, None]  # [K, 1, h, i, 1]
        return (q.unflatten(0, (k, -1)) * scale.to(q.dtype)).flatten(0, 1)
