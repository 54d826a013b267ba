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
    """One attention layer's keys and values, ``[b, h, t, d]`` each.

    Self-attention ``append``s the keys and values of the tokens of every step into buffers
    allocated once for ``capacity`` tokens (no copy of the past per step); cross-attention keeps
    the context's keys and values, computed on first use (``context``).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity, self.length = capacity, 0
        self.buffer: Tensor | None = None  # [2, b, h, capacity, d]: keys, values

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store the new ``k, v: [b, h, n, d]``; returns the keys and values of all tokens so far,
        ``[b, h, t + n, d]``."""
        end = self.length + k.shape[2]
        if end > self.capacity:
            raise ValueError(
                f"key/value cache holds {self.capacity} tokens; cannot add {k.shape[2]} to "
                f"{self.length}"
            )
        if self.buffer is None:
            b, h, _, d = k.shape
            self.buffer = k.new_empty(2, b, h, self.capacity, d)
        self.buffer[0, :, :, self.length : end] = k
        self.buffer[1, :, :, self.length : end] = v
        self.length = end
        return self.buffer[0, :, :, :end], self.buffer[1, :, :, :end]

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
