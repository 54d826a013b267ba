"""Position samplers: which positions a sequence of ``n`` tokens gets. An axis of every run,
independent of the encoding (``positions=contiguous|randomized``)."""

from __future__ import annotations

import torch
from torch import Tensor

from pelab.pe.base import ConfigError


class ContiguousPositions:
    """Positions ``0 .. n-1``: the model's default (returns None)."""

    max_position = 0  # imposes no size on the model

    def check(self, longest: int, position_dims: int = 1) -> None:
        """Any length works; a task with its own k-D coordinates (a grid) uses those."""

    def __call__(
        self, batch: int, n: int, generator: torch.Generator | None = None, device=None
    ) -> None:
        return None


class RandomizedPositions:
    """Randomized positional encodings (Ruoss et al. 2023, "Randomized Positional Encodings
    Boost Length Generalization of Transformers"): each sequence gets a sorted random subset of
    ``[0, max_position)`` as its positions, with ``max_position`` far beyond the longest test
    sequence, so every position an evaluation will use was seen in training.

    As in the paper, evaluation samples positions the same way (answering whether randomisation
    is used at test time: yes); there each (length, batch) draws from its own seeded generator,
    so evaluation stays deterministic. Works with every encoding that reads positions; ``none``
    ignores them.
    """

    def __init__(self, max_position: int = 2048) -> None:
        if max_position < 1:
            raise ConfigError(f"positions.max_position must be >= 1, got {max_position}")
        self.max_position = max_position

    def check(self, longest: int, position_dims: int = 1) -> None:
        if position_dims != 1:
            raise ConfigError(
                f"positions=randomized samples 1-D positions, but this task gives "
                f"{position_dims}-D coordinates; use positions=contiguous"
            )
        if longest > self.max_position:
            raise ConfigError(
                f"positions.max_position={self.max_position} is shorter than the longest "
                f"sequence of this run ({longest} tokens); raise it well beyond that (the paper "
                f"uses about 4x the longest test length)"
            )

    def __call__(
        self, batch: int, n: int, generator: torch.Generator | None = None, device=None
    ) -> Tensor:
        """``[batch, n]`` sorted positions, distinct within each row (drawn on the CPU)."""
        scores = torch.rand(batch, self.max_position, generator=generator)
        return scores.topk(n, dim=-1).indices.sort(dim=-1).values.to(device)
