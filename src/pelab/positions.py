"""Positions, in one module.

- ``Positions``: the query and key positions every encoding hook reads (``pelab.pe.base``);
  ``Positions.of`` is the one conversion from a tensor (or nothing: contiguous) to it.
- Position samplers: which positions the canonical sequence ``BOS prompt SEP answer`` of a
  batch gets, ``[b|1, n + m + 2(, k)]``. One is chosen per run at build time
  (``build_sampler``): the task's own coordinates when it has k-D ones (a grid), else
  ``positions=contiguous`` (``0 .. n+m+1``) or ``positions=randomized`` (Ruoss et al. 2023).
  Every sampler returns a tensor, so nothing downstream has a "no positions" case.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from pelab.devices import to_device
from pelab.errors import ConfigError, choices_checked


@dataclass(eq=False)
class Positions:
    """Explicit positions of queries ``q: [b|1, i]`` and keys ``k: [b|1, j]``, or k-D positions
    ``q: [b|1, i, k]``, ``k: [b|1, j, k]`` (e.g. a grid's (row, col), ``k = 2``).

    A leading dimension of 1 broadcasts over the batch. A fresh object is made for every forward
    pass, so ``memo`` lets layers share work (a bias matrix, a cos/sin table) within one forward.
    """

    q: Tensor
    k: Tensor
    # True: 1-D positions drawn per layer, ``[b|1, n, 1 + L]`` (``layer_draws``)
    layered: bool = False
    _memo: dict[Any, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def contiguous(cls, n: int, device: torch.device | None = None, offset: int = 0) -> Positions:
        return cls.of(None, n, device, offset)

    @classmethod
    def from_tensor(cls, pos: Tensor) -> Positions:
        """``[n]`` (one unbatched sequence), ``[b|1, n]`` or ``[b|1, n, k]``: a 2-D tensor is
        always batched 1-D positions, never ``[n, k]``."""
        return cls.of(pos, pos.shape[0] if pos.dim() == 1 else pos.shape[1])

    @classmethod
    def of(
        cls,
        pos: Tensor | None,
        n: int,
        device: torch.device | None = None,
        offset: int = 0,
        layered: bool = False,
    ) -> Positions:
        """The positions of ``n`` tokens fed to a network: ``pos`` as given (``[n]``,
        ``[b|1, n]`` or ``[b|1, n, k]``), or, when a caller gives none, ``offset .. offset+n-1``
        (a network called directly, without a sampler). ``layered``: a network whose sampler
        draws per layer (``[b|1, n, 1 + L]``, ``RandomizedPositions(layers="each")``)."""
        if pos is None:
            return cls(*[contiguous(n, device, offset)] * 2)
        if pos.dim() == 1:
            pos = pos[None]
        return cls(pos, pos, layered)

    def layer_draws(self, n_layers: int) -> list[Positions]:
        """Layered positions split into ``1 + n_layers`` draws of 1-D positions: the
        embedding's, then each layer's."""
        if self.q.dim() != 3 or self.q.shape[-1] != 1 + n_layers:
            raise ConfigError(
                f"a network of {n_layers} layers drawing positions per layer reads positions "
                f"[b, n, {1 + n_layers}] (one draw for its embedding, one per layer), got "
                f"{list(self.q.shape)}"
            )
        return [Positions(self.q[..., i], self.k[..., i]) for i in range(1 + n_layers)]

    @property
    def position_dims(self) -> int:
        """Coordinates per position: 1 for ``[b|1, n]``, ``k`` for ``[b|1, n, k]``."""
        return 1 if self.q.dim() == 2 else self.q.shape[-1]

    def require(self, position_dims: int, reader: str) -> None:
        """A ``ConfigError`` unless these positions have ``position_dims`` coordinates."""
        if self.position_dims != position_dims:
            raise ConfigError(
                f"{reader} reads {position_dims}-D positions [b, n, {position_dims}] but got "
                f"positions of shape {list(self.q.shape)}; give the model a task with "
                f"{position_dims}-D coordinates"
            )

    def delta(self) -> Tensor:
        """Relative offsets ``q_i - k_j``: ``[b|1, i, j]``, or ``[b|1, i, j, k]`` for k-D."""
        if self.q.dim() == 2:
            return self.q[..., :, None] - self.k[..., None, :]
        return self.q[:, :, None] - self.k[:, None, :]

    def memo(self, key: Any, compute: Callable[[], Any]) -> Any:
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]


def contiguous(n: int, device: torch.device | None = None, offset: int = 0) -> Tensor:
    """``[1, n]``: positions ``offset .. offset + n - 1``."""
    return torch.arange(offset, offset + n, device=device)[None]


class PositionSampler:
    """Which positions the canonical sequence ``BOS prompt SEP answer`` of a batch gets.

    ``sampler(batch, prompt_length, answer_length, generator, device)`` ->
    ``[b|1, n + m + 2(, k)]``; a subclass implements ``sample`` (drawing on the CPU from
    ``generator``, so runs are reproducible; the caller's ``device`` gets a copy that does not
    block the host). ``shared``: its samples do not depend on the generator (contiguous
    positions, a task's coordinates), so the members of a stack share them
    (``pelab.models.stacked.fold_positions`` relies on this instead of comparing values on the
    device); a randomized sample of one sequence, ``[1, n]`` too, is each member's own.
    ``max_position`` is the largest position it can give (0: none beyond the sequence), which
    sizes tables such as ``pe=learned``; ``check`` refuses a run it cannot serve.
    """

    max_position = 0
    shared = False
    layered = False  # True: a draw per layer, [b|1, n, 1 + L] (RandomizedPositions(layers="each"))

    def for_layers(self, n_layers: int) -> PositionSampler:
        """This sampler for a network of ``n_layers`` layers (a layered one draws for each)."""
        return self

    def check(self, longest: int, position_dims: int = 1) -> None:
        """A ``ConfigError`` when the run's longest sequence or its task's coordinates do not
        fit; default: every run fits."""

    def sample(
        self, batch: int, prompt_length: int, answer_length: int, generator: torch.Generator | None
    ) -> Tensor:
        raise NotImplementedError

    def __call__(
        self,
        batch: int,
        prompt_length: int,
        answer_length: int,
        generator: torch.Generator | None = None,
        device: torch.device | None = None,
    ) -> Tensor:
        return to_device(self.sample(batch, prompt_length, answer_length, generator), device)


class ContiguousPositions(PositionSampler):
    """Positions ``0 .. n+m+1`` of ``BOS prompt SEP answer``, ``[1, n + m + 2]``: the default."""

    shared = True

    def sample(
        self, batch: int, prompt_length: int, answer_length: int, generator: torch.Generator | None
    ) -> Tensor:
        return contiguous(prompt_length + answer_length + 2, torch.device("cpu"))


class RandomizedPositions(PositionSampler):
    """Randomized positional encodings (Ruoss et al. 2023, "Randomized Positional Encodings
    Boost Length Generalization of Transformers"): each sequence gets a sorted random subset of
    ``[0, max_position)`` as its positions, ``[batch, n + m + 2]``, with ``max_position`` far
    beyond the longest test sequence, so every position an evaluation will use was seen in
    training.

    ``per``: ``sequence`` (a draw per sequence, the default) or ``batch`` (one draw shared by
    the batch, ``[1, n + m + 2]``: the RPE code's ``jax.random.choice`` of one set per call).
    ``layers``: ``shared`` (every layer reads the same draw) or ``each`` (the RPE code's: the
    embedding and every attention layer draw their own, ``[b|1, n + m + 2, 1 + L]``,
    ``Positions.layer_draws``; encoders only).

    As in the paper, evaluation samples positions the same way (answering whether randomisation
    is used at test time: yes); there each (length, batch) draws from its own seeded generator,
    so evaluation stays deterministic. Works with every encoding that reads positions; ``none``
    ignores them.
    """

    @choices_checked("positions")
    def __init__(
        self,
        max_position: int = 2048,
        per: Literal["sequence", "batch"] = "sequence",
        layers: Literal["shared", "each"] = "shared",
    ) -> None:
        if max_position < 1:
            raise ConfigError(f"positions.max_position must be >= 1, got {max_position}")
        self.max_position, self.per = max_position, per
        self.layered, self.draws = layers == "each", 1

    def for_layers(self, n_layers: int) -> PositionSampler:
        if not self.layered:
            return self
        sampler = copy.copy(self)
        sampler.draws = 1 + n_layers
        return sampler

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

    def sample(
        self, batch: int, prompt_length: int, answer_length: int, generator: torch.Generator | None
    ) -> Tensor:
        """Sorted positions, distinct within each row (and draw)."""
        n = prompt_length + answer_length + 2
        rows = batch if self.per == "sequence" else 1
        scores = torch.rand(rows, self.draws, self.max_position, generator=generator, device="cpu")
        drawn = scores.topk(n, dim=-1).indices.sort(dim=-1).values  # [rows, draws, n]
        return drawn.permute(0, 2, 1) if self.layered else drawn[:, 0]


class TaskCoordinates(PositionSampler):
    """The task's own k-D coordinates of ``BOS prompt SEP answer`` (e.g. a grid's (row, col)),
    ``[1, n + m + 2, k]``: the sampler of every task with ``position_dims > 1``."""

    shared = True

    def __init__(self, task: Any) -> None:
        self.task = task

    def sample(
        self, batch: int, prompt_length: int, answer_length: int, generator: torch.Generator | None
    ) -> Tensor:
        return self.task.coordinates(prompt_length, answer_length)[None]


def build_sampler(configured: PositionSampler, task: Any, n_layers: int = 1) -> PositionSampler:
    """The run's sampler: ``configured`` (``positions=``), checked against the task's longest
    sequence and coordinates, or the task's own coordinates when it has k-D ones; a layered one
    draws for the network's ``n_layers``."""
    configured.check(task.max_sequence_length(), task.position_dims)
    if task.position_dims > 1:
        return TaskCoordinates(task)
    return configured.for_layers(n_layers)
