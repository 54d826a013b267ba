"""Sort (Kazemnejad et al. 2023): single-token symbols, or multi-digit numbers."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pelab.errors import ConfigError
from pelab.tasks.base import Task, register_task
from pelab.tokens import N_SPECIAL

MAX_DIGITS = 18  # numbers are compared as int64


@register_task("sort")
class SortTask(Task):
    """Sort ``length`` items in ascending order (duplicates kept); length axis: numbers to sort.

    ``digits: null`` (default): each item is one symbol, compared by token id;
    ``BOS c a b a SEP`` -> ``a a b c``. Mostly a content task: position only tells which answer
    slot comes next.

    ``digits: D``: each item is a number drawn uniformly from ``[0, 10^D)``, written as ``D``
    digit tokens, most significant first, zero-padded, with no separator (the fixed width marks
    the boundaries); the alphabet is the 10 digits (token id ``3 + d`` for digit ``d``), so
    ``num_symbols`` must be left out. With ``D = 2``: ``BOS 4 2 0 7 1 5 SEP`` ->
    ``0 7 1 5 4 2`` (42, 07, 15 -> 07, 15, 42); prompt and answer have ``D * length`` tokens.
    """

    length_axis = "numbers"
    variants = ({"digits": 4},)
    digit_tokens = tuple(range(N_SPECIAL, N_SPECIAL + 10))  # with ``digits`` only (``__init__``)

    def __init__(self, digits: int | None = None, **kwargs: Any) -> None:
        if digits is not None:
            if not 1 <= digits <= MAX_DIGITS:
                raise ConfigError(
                    f"SortTask: task.digits must be null or in [1, {MAX_DIGITS}], got {digits}"
                )
            if kwargs.get("num_symbols") not in (None, 10):
                raise ConfigError(
                    "SortTask: with task.digits set the alphabet is the 10 digits; leave "
                    f"task.num_symbols out (null) or set it to 10, got {kwargs['num_symbols']}"
                )
            kwargs["num_symbols"] = 10
        self.digits = digits
        if digits is None:  # the symbols are not digits
            self.digit_tokens = ()
        super().__init__(**kwargs)

    @property
    def width(self) -> int:
        """Tokens per item."""
        return self.digits or 1

    def prompt_length(self, length: int) -> int:
        return self.width * length

    def answer_length(self, length: int) -> int:
        return self.width * length

    def solve(self, prompt: Tensor) -> Tensor:
        if self.digits is None:
            return prompt.sort(dim=-1).values
        digits = (prompt - N_SPECIAL).unflatten(1, (-1, self.digits))  # [b, length, D]
        powers = 10 ** torch.arange(self.digits - 1, -1, -1, device=prompt.device)
        order = (digits * powers).sum(-1).argsort(dim=1, stable=True)  # [b, length]
        ordered = digits.gather(1, order[..., None].expand_as(digits))
        return ordered.flatten(1) + N_SPECIAL

    def reference(self, prompt: list[int]) -> list[int]:
        if self.digits is None:
            return sorted(prompt)
        d = self.digits
        numbers = [prompt[i : i + d] for i in range(0, len(prompt), d)]
        by_value = sorted(numbers, key=lambda n: int("".join(str(t - N_SPECIAL) for t in n)))
        return [token for number in by_value for token in number]
