"""Counting: how often a query letter occurs in the prompt, as a fixed-width decimal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from pelab.errors import ConfigError
from pelab.tasks.base import Task, register_task
from pelab.tokens import N_SPECIAL

DIGIT_0 = N_SPECIAL  # token of digit d: DIGIT_0 + d; letters are the tokens after the 10 digits
LETTER_0 = N_SPECIAL + 10


@register_task("counting")
class CountingTask(Task):
    """``BOS a c a b a a SEP`` -> ``0 3`` (``count_digits = 2``: the last letter is the query,
    ``a``, which occurs 3 times before it).

    The prompt is ``length`` letters, uniform over ``num_letters`` letters, then a query letter,
    uniform over the same letters; the answer is the number of times the query occurs among
    the ``length`` letters, written with ``count_digits`` decimal digits, most significant
    first, zero-padded (every answer has the same width). Contextual counting: the model must
    compare every letter with the query and count the matches, so it cannot use positions as a
    shortcut, and the count (about ``length / num_letters``) grows with the length. The length
    axis is the number of letters before the query (prompt ``length + 1`` tokens); every length
    needs ``length <= 10**count_digits - 1``. Alphabet: the digits ``0``-``9`` (tokens
    ``N_SPECIAL ..``), then the letters; ``num_symbols = 10 + num_letters`` (leave it out).
    """

    length_axis = "letters before the query"
    default_train_lengths = (1, 20)
    default_eval_lengths = (10, 20, 30, 40)
    digit_tokens = tuple(range(DIGIT_0, DIGIT_0 + 10))  # the count's digits; letters are not

    def __init__(
        self,
        num_letters: int = 4,
        count_digits: int = 2,
        **common: Any,
    ) -> None:
        if num_letters < 2 or count_digits < 1:
            raise ConfigError(
                "counting needs task.num_letters >= 2 and task.count_digits >= 1, got "
                f"{num_letters} and {count_digits}"
            )
        self.num_letters, self.count_digits = int(num_letters), int(count_digits)
        self.fixed_num_symbols = 10 + self.num_letters
        super().__init__(**common)

    @classmethod
    def settings_at(cls, length: int, directory: Path) -> dict[str, Any]:
        return {"count_digits": len(str(length))}  # a digit per decimal place of the count

    def check_length(self, length: int) -> None:
        super().check_length(length)
        if length >= 10**self.count_digits:
            raise ConfigError(
                f"counting: a count up to {length} does not fit in task.count_digits="
                f"{self.count_digits} digits; raise it to {len(str(length))}"
            )

    def prompt_length(self, length: int) -> int:
        return length + 1

    def answer_length(self, length: int) -> int:
        return self.count_digits

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        letters = LETTER_0 + self.num_letters
        prompt = torch.randint(LETTER_0, letters, (batch, length + 1), generator=generator)
        return prompt, self.solve(prompt)

    def solve(self, prompt: Tensor) -> Tensor:
        count = (prompt[:, :-1] == prompt[:, -1:]).sum(dim=1, keepdim=True)  # [b, 1]
        powers = 10 ** torch.arange(self.count_digits - 1, -1, -1)  # [d]: 10^(d-1) .. 1
        return DIGIT_0 + count // powers % 10

    def reference(self, prompt: list[int]) -> list[int]:
        count = prompt[:-1].count(prompt[-1])
        return [DIGIT_0 + int(d) for d in str(count).zfill(self.count_digits)]
