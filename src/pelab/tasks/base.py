"""The task interface, the task registry, and the special tokens shared by all tasks.

A task maps a prompt of ``length`` symbols to an answer. It knows nothing about model kinds:
``pelab.layouts`` turns (prompt, answer) into a decoder or an encoder sequence.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from pelab.pe.base import ConfigError

BOS, SEP, BLANK = 0, 1, 2  # begin-of-sequence, prompt/answer separator, encoder answer slot
N_SPECIAL = 3


class Task(ABC):
    """A length-parameterised sequence task with a train-short / test-long protocol.

    ``train_lengths = [min, max]``: each training batch draws one length uniformly from it (as
    in Deletang et al. 2023). ``eval_lengths``: every metric is reported per length, split into
    in-distribution (inside the train range) and out-of-distribution lengths. Symbols are token
    ids ``N_SPECIAL .. N_SPECIAL + num_symbols - 1``.
    """

    def __init__(
        self,
        train_lengths: Sequence[int] = (1, 16),
        eval_lengths: Sequence[int] = (8, 16, 24, 32),
        num_symbols: int = 32,
        n_val: int = 128,
        n_test: int = 512,
        eval_seed: int = 1234,
    ) -> None:
        name = type(self).__name__
        if len(train_lengths) != 2 or not 1 <= train_lengths[0] <= train_lengths[1]:
            raise ConfigError(
                f"{name}: task.train_lengths must be [min, max] with 1 <= min <= max, "
                f"got {list(train_lengths)}"
            )
        if not eval_lengths or min(eval_lengths) < 1:
            raise ConfigError(
                f"{name}: task.eval_lengths must be a non-empty list of lengths >= 1, "
                f"got {list(eval_lengths)}"
            )
        if not any(train_lengths[0] <= n <= train_lengths[1] for n in eval_lengths):
            raise ConfigError(
                f"{name}: task.eval_lengths {list(eval_lengths)} has no in-distribution length "
                f"(inside task.train_lengths {list(train_lengths)}); add one, e.g. "
                f"{train_lengths[1]}, so the run can show the task was learned"
            )
        if num_symbols < 2:
            raise ConfigError(f"{name}: task.num_symbols must be >= 2, got {num_symbols}")
        if n_val < 1 or n_test < 1:
            raise ConfigError(f"{name}: task.n_val and task.n_test must be >= 1")
        self.train_lengths = (int(train_lengths[0]), int(train_lengths[1]))
        self.eval_lengths = sorted({int(n) for n in eval_lengths})
        self.num_symbols, self.n_val, self.n_test, self.eval_seed = (
            num_symbols,
            n_val,
            n_test,
            eval_seed,
        )

    @property
    def vocab_size(self) -> int:
        return N_SPECIAL + self.num_symbols

    position_dims = 1  # coordinates per token: 1 (a sequence), 2 (a grid's row and column)

    def prompt_length(self, length: int) -> int:
        """Prompt tokens at ``length`` on the task's length axis."""
        return length

    def answer_length(self, length: int) -> int:
        """Answer tokens at ``length`` on the task's length axis."""
        return length

    def coordinates(self, prompt_length: int, answer_length: int) -> Tensor | None:
        """The task's own positions for ``BOS prompt SEP answer``, ``[n + m + 2, position_dims]``,
        or None to use the run's position sampler (1-D tasks)."""
        return None

    def in_distribution(self, length: int) -> bool:
        return self.train_lengths[0] <= length <= self.train_lengths[1]

    def max_sequence_length(self) -> int:
        """Tokens of the longest sequence any layout feeds the model: BOS, prompt, SEP, answer."""
        longest = max(self.train_lengths[1], *self.eval_lengths)
        return self.prompt_length(longest) + self.answer_length(longest) + 2

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """``batch`` prompts of ``length`` random symbols and their answers, ``[b, n]`` each."""
        prompt = torch.randint(N_SPECIAL, self.vocab_size, (batch, length), generator=generator)
        return prompt, self.solve(prompt)

    @abstractmethod
    def solve(self, prompt: Tensor) -> Tensor:
        """The answers to ``prompt: [b, n]``, vectorised (the generator's fast path)."""

    @staticmethod
    @abstractmethod
    def reference(prompt: list[int]) -> list[int]:
        """The answer to one prompt in plain Python: the reference solver the tests trust."""

    def spec(self) -> dict[str, Any]:
        """Everything that changes the data; keys the evaluation-set cache."""
        return {"task": type(self).__name__, "num_symbols": self.num_symbols}


TASK_REGISTRY: dict[str, type[Task]] = {}


def register_task(name: str) -> Callable[[type[Task]], type[Task]]:
    """Class decorator: make a task available by name."""

    def add(cls: type[Task]) -> type[Task]:
        if name in TASK_REGISTRY:
            raise ValueError(f"task {name!r} is registered twice")
        TASK_REGISTRY[name] = cls
        cls.task_name = name
        return cls

    return add
