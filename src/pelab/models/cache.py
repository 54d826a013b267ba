"""Key/value cache for incremental (greedy) decoding.

A causal model's keys and values of a token never change once the token is fed, so a decoding
step only needs the new token's query, key and value: its query attends to the cached keys of
every earlier token. ``n`` greedy steps then cost ``n`` forwards of one token instead of ``n``
forwards of the growing prefix.

Keys are cached *after* ``transform_qk`` (rotary encodings rotate each new key once, at its own
position); every other hook (``logit_bias``, ``modify_logits``, ...) is computed afresh each step
from ``Positions(q=new positions, k=all positions so far)``, which the cache also keeps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from pelab.positions import Positions


class LayerCache:
    """One attention layer's keys ``[b, h, t, d_k]`` and values ``[b, h, t, d]``.

    Self-attention ``append``s the keys and values of the tokens of every step into buffers
    allocated once for ``capacity`` tokens (no copy of the past per step); keys and values have
    a buffer each, as ``transform_qk`` may change the width of the keys (``pe=pope``: ``2d``).
    Cross-attention keeps the context's keys and values, computed on first use (``context``).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity, self.length = capacity, 0
        self.keys: Tensor | None = None  # self-attention: [b, h, capacity, d_k]
        self.values: Tensor | None = None  # self-attention: [b, h, capacity, d]
        self.buffer: Tensor | None = None  # cross-attention: [2, b, h, t, d], keys and values

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store the new keys ``k: [b, h, n, d_k]`` and values ``v: [b, h, n, d]``; returns the
        keys and values of all tokens so far, ``[b, h, t + n, d_k]`` and ``[b, h, t + n, d]``."""
        end = self.length + k.shape[2]
        if end > self.capacity:
            raise ValueError(
                f"key/value cache holds {self.capacity} tokens; cannot add {k.shape[2]} to "
                f"{self.length}"
            )
        if self.keys is None or self.values is None:
            self.keys = k.new_empty(*k.shape[:2], self.capacity, k.shape[3])
            self.values = v.new_empty(*v.shape[:2], self.capacity, v.shape[3])
        self.keys[:, :, self.length : end] = k
        self.values[:, :, self.length : end] = v
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]

    def context(self, project: Callable[[], tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
        """Cross-attention: the context's keys and values, from ``project()`` on first use."""
        if self.buffer is None:
            self.buffer = torch.stack(project())
            self.length = self.buffer.shape[3]
        return self.buffer[0], self.buffer[1]


@dataclass
class KVCache:
    """Everything incremental decoding keeps between steps: per layer, the self-attention cache
    and (encoder–decoder) the cross-attention cache, plus the positions of the tokens fed so far,
    ``[b|1, t]`` (``[b|1, t, k]`` for k-D positions)."""

    capacity: int
    n_layers: int
    self_attn: list[LayerCache] = field(init=False)
    cross_attn: list[LayerCache] = field(init=False)
    positions: Tensor | None = None
    length: int = 0

    def __post_init__(self) -> None:
        self.self_attn = [LayerCache(self.capacity) for _ in range(self.n_layers)]
        self.cross_attn = [LayerCache(self.capacity) for _ in range(self.n_layers)]

    def advance(self, n: int, positions: Tensor | None, device: torch.device) -> Positions:
        """Positions of a step that feeds ``n`` new tokens: queries at the new tokens' positions
        (given, or continuing ``0, 1, ..`` when None), keys at those of every token so far."""
        new = Positions.of(positions, n, device, offset=self.length).q
        keys = new if self.positions is None else _concat_tokens(self.positions, new)
        self.positions, self.length = keys, self.length + n
        return Positions(new, keys)


def _concat_tokens(old: Tensor, new: Tensor) -> Tensor:
    """``[b|1, t(, k)]`` and ``[b|1, n(, k)]`` -> ``[b|1, t + n(, k)]`` (batch dims broadcast)."""
    b = max(old.shape[0], new.shape[0])
    return torch.cat((old.expand(b, *old.shape[1:]), new.expand(b, *new.shape[1:])), dim=1)
