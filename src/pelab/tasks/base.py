"""The task interface and the task registry (the special tokens live in ``pelab.tokens``).

A task maps a prompt to an answer, both sized by one point ``length`` of the task's length axis
(``length_axis``: tokens, digits per operand, number of terms, ...). It knows nothing about model
kinds: ``pelab.model_kinds`` turns (prompt, answer) into the sequences of each kind, so every
task runs in every kind. The contract every task keeps (``tests/tasks/test_tasks.py`` checks it
for every registered task):

- at a given ``length`` every sample has ``prompt_length(length)`` prompt tokens and
  ``answer_length(length)`` answer tokens (a task pads inside its own alphabet if it must);
- prompt and answer tokens are symbols, ``N_SPECIAL <= token < vocab_size``: the special tokens
  BOS, SEP and BLANK belong to the model kinds, never to a task's data;
- ``sample`` is vectorised and a pure function of the generator's state; its answers equal
  ``reference`` (plain Python, the solver the tests trust) on every prompt;
- evaluation sets come from ``sample_eval``, which is ``sample`` unless the task evaluates on
  other data (held-out examples, another distribution);
- ``spec()`` names every constructor parameter that changes the data (it keys the cache): each
  is an argument of the task's constructor, kept as the attribute of its name.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor

from pelab.errors import ConfigError, choices_checked
from pelab.lengths import expand_lengths  # noqa: F401 (re-exported: tasks' home of it)
from pelab.tokens import N_SPECIAL


class Task(ABC):
    """A length-parameterised sequence task with a train-short / test-long protocol.

    ``train_lengths = [min, max]``: each training batch draws one length uniformly from it (as
    in Deletang et al. 2023). ``eval_lengths``: every metric is reported per length, split into
    in-distribution (inside the train range) and out-of-distribution lengths. Lengths are points
    of ``length_axis``. Symbols are token ids ``N_SPECIAL .. N_SPECIAL + num_symbols - 1``.

    Defaults: ``default_train_lengths``, ``default_eval_lengths`` and ``default_num_symbols``
    apply when the argument is left out (``None``); the task's config file repeats them.
    Alphabet: a task over any alphabet takes ``num_symbols`` (default ``default_num_symbols``);
    a task with a fixed alphabet (digits, bits, operators) sets ``fixed_num_symbols`` and then
    ``num_symbols`` may only be left out (``None``) or equal it, anything else is refused.
    Lengths: ``check_length`` refuses lengths the task cannot build; ``__init__`` calls it on
    both ends of the train range and on every evaluation length (a subclass whose check reads
    its own parameters sets them before calling ``super().__init__``).

    Choices: an option with a ``Literal`` type refuses a value it does not list, from a config
    (``check_types``) and from a constructor call alike (``register_task`` gives the
    constructor ``choices_checked``).
    """

    length_axis: ClassVar[str] = "tokens"  # what one unit of ``length`` is
    position_dims: ClassVar[int] = 1  # coordinates per token: 1 (a sequence), 2 (a grid)
    default_train_lengths: ClassVar[tuple[int, int]] = (1, 16)
    default_eval_lengths: ClassVar[tuple[int, ...]] = (8, 16, 24, 32)
    default_num_symbols: ClassVar[int] = 32
    fixed_num_symbols: ClassVar[int | None] = None  # set by tasks with a fixed alphabet
    # the shortest length the task can build, and why (e.g. two operands and an operator)
    min_length: ClassVar[int] = 1
    min_length_why: ClassVar[str] = ""
    # the longest length of a bounded length axis (``scan``: 48 actions); the contract tests
    # build such a task there instead of at the benchmark's lengths 64 and 512
    max_length: ClassVar[int | None] = None
    # other settings that change the kind of data (e.g. ``{"variant": "double"}``): the contract
    # tests and the benchmark run each of them as well as the defaults
    variants: ClassVar[tuple[dict[str, Any], ...]] = ()
    # the token ids that are digits of numbers (decimal, or the bits of a binary number), so an
    # encoding can tell where each number starts (Abacus: ``pe=abacus``); every other token
    # (operators, letters, bits used as symbols, the special tokens) is not one. A task whose
    # alphabet depends on its settings sets it per instance (``sort``: only with ``digits``).
    digit_tokens: ClassVar[tuple[int, ...]] = ()
    task_name: ClassVar[str]  # set by ``register_task``

    def __init__(
        self,
        train_lengths: Sequence[int] | None = None,
        eval_lengths: Sequence[int | str] | None = None,
        num_symbols: int | None = None,
        n_val: int = 128,
        n_test: int = 512,
        eval_seed: int = 1234,
    ) -> None:
        name = type(self).__name__
        num_symbols = self._resolve_num_symbols(num_symbols)
        train_lengths = self.default_train_lengths if train_lengths is None else train_lengths
        eval_lengths = expand_lengths(
            self.default_eval_lengths if eval_lengths is None else eval_lengths
        )
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
        for length in sorted({*self.train_lengths, *self.eval_lengths}):
            self.check_length(length)

    def _resolve_num_symbols(self, num_symbols: int | None) -> int:
        fixed = self.fixed_num_symbols
        if fixed is None:
            return self.default_num_symbols if num_symbols is None else int(num_symbols)
        if num_symbols is not None and num_symbols != fixed:
            raise ConfigError(
                f"{type(self).__name__}: the task has a fixed alphabet of {fixed} symbols; "
                f"leave task.num_symbols out (null) or set it to {fixed}, got {num_symbols}"
            )
        return fixed

    def check_length(self, length: int) -> None:
        """Raise ``ConfigError`` (naming ``length`` and the valid ones) if the task cannot be
        built at ``length``; every length >= ``min_length`` is valid unless a task says
        otherwise."""
        if length < self.min_length:
            why = f" ({self.min_length_why})" if self.min_length_why else ""
            raise ConfigError(
                f"{type(self).__name__}: lengths must be >= {self.min_length}{why}, got {length}"
            )

    def lengths_between(self, low: int, high: int) -> list[int]:
        """The lengths from ``low`` to ``high`` the task can build; training draws its lengths
        among those of ``train_lengths``. All of them unless the length axis has gaps
        (``scan``: no command has 23 actions)."""
        return list(range(low, high + 1))

    @classmethod
    def example_settings(cls, directory: Path) -> dict[str, Any]:
        """Settings of a small instance, ``cls(**example_settings(directory))``, for the
        contract tests (every task trains and tests in every model kind with them) and docs.
        Default: none, the task's defaults. A task that reads external data (``from_dataset``)
        writes a tiny example into ``directory`` and names it."""
        return {}

    @classmethod
    def settings_at(cls, length: int, directory: Path) -> dict[str, Any]:
        """Settings beyond the defaults that the task needs to be built at ``length`` (the
        benchmark builds every task at lengths 64 and 512); a task that reads data writes it
        into ``directory``. Default: none."""
        return {}

    @property
    def vocab_size(self) -> int:
        return N_SPECIAL + self.num_symbols

    def prompt_length(self, length: int) -> int:
        """Prompt tokens at ``length`` on the task's length axis."""
        return length

    def answer_length(self, length: int) -> int:
        """Answer tokens at ``length`` on the task's length axis."""
        return length

    def coordinates(self, prompt_length: int, answer_length: int) -> Tensor:
        """The task's own positions for ``BOS prompt SEP answer``, ``[n + m + 2, position_dims]``:
        required of a task with ``position_dims > 1`` (the run then samples no positions,
        ``pelab.positions.TaskCoordinates``); a 1-D task takes the run's position sampler."""
        raise NotImplementedError(
            f"{type(self).__name__} has position_dims={self.position_dims} but no coordinates()"
        )

    def in_distribution(self, length: int) -> bool:
        return self.train_lengths[0] <= length <= self.train_lengths[1]

    def sequence_length(self, length: int) -> int:
        """Tokens of the canonical sequence ``BOS prompt SEP answer`` at ``length``."""
        return self.prompt_length(length) + self.answer_length(length) + 2

    def max_sequence_length(self) -> int:
        """Tokens of the longest sequence any model kind feeds, in training or evaluation."""
        return self.sequence_length(max(self.train_lengths[1], *self.eval_lengths))

    def max_train_sequence_length(self) -> int:
        """Tokens of the longest training sequence (the context length a model was trained on,
        e.g. the ``original_max_len`` of RoPE scalings)."""
        return self.sequence_length(self.train_lengths[1])

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """``batch`` prompts of uniformly random symbols, ``[b, prompt_length(length)]``, and
        their answers ``[b, answer_length(length)]``."""
        shape = (batch, self.prompt_length(length))
        prompt = torch.randint(N_SPECIAL, self.vocab_size, shape, generator=generator)
        return prompt, self.solve(prompt)

    def sample_eval(
        self, split: str, batch: int, length: int, generator: torch.Generator
    ) -> tuple[Tensor, Tensor]:
        """The evaluation set ``split`` (``"val"`` or ``"test"``) at ``length``, shaped as by
        ``sample``: ``batch`` samples, or fewer (at least one) when the task has fewer distinct
        evaluation samples. Default: ``sample(batch, length, generator)``."""
        return self.sample(batch, length, generator)

    @abstractmethod
    def solve(self, prompt: Tensor) -> Tensor:
        """The answers to ``prompt: [b, n]``, vectorised (the generator's fast path)."""

    @abstractmethod
    def reference(self, prompt: list[int]) -> list[int]:
        """The answer to one prompt in plain Python: the reference solver the tests trust (a
        ``staticmethod`` when the answer does not depend on the task's parameters)."""

    def spec(self) -> dict[str, Any]:
        """Everything that changes the data; keys the evaluation-set cache: the task, its
        alphabet and every parameter its own constructors name (read off their signatures, each
        kept as the attribute of that name), subclass after base class."""
        spec = {"task": type(self).__name__, "num_symbols": self.num_symbols}
        for cls in reversed(type(self).__mro__):
            if cls is Task or not issubclass(cls, Task) or "__init__" not in vars(cls):
                continue
            for p in inspect.signature(cls.__init__).parameters.values():
                if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                    spec.setdefault(p.name, getattr(self, p.name))
        return spec


TASK_REGISTRY: dict[str, type[Task]] = {}


def register_task(name: str) -> Callable[[type[Task]], type[Task]]:
    """Class decorator: make a task available by name; its constructor refuses a value that an
    option's ``Literal`` type does not list (``choices_checked``)."""

    def add(cls: type[Task]) -> type[Task]:
        if name in TASK_REGISTRY:
            raise ValueError(f"task {name!r} is registered twice")
        TASK_REGISTRY[name] = cls
        cls.task_name = name
        if "__init__" in vars(cls):
            cls.__init__ = choices_checked("task")(cls.__init__)
        return cls

    return add
