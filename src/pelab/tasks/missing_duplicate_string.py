"""Missing duplicate string (Deletang et al. 2023, context-sensitive): a duplicated binary string
with one bit hidden -> the hidden bit."""

from __future__ import annotations

import torch
from torch import Tensor

from pelab.tasks.base import Task, register_task
from pelab.tokens import N_SPECIAL

SYMBOLS = ("0", "1", "?", "_")
ZERO, ONE, MISSING, EMPTY = (N_SPECIAL + i for i in range(len(SYMBOLS)))


@register_task("missing_duplicate_string")
class MissingDuplicateStringTask(Task):
    """``w w`` with one token replaced by ``?`` -> the replaced bit, as in the paper (its
    ``MissingDuplicateString``); length axis: prompt tokens, at least 2.

    ``w`` has ``length // 2`` uniform bits; the hidden position is uniform over the ``2 *
    (length // 2)`` tokens of ``w w``; an odd length ends with one ``_`` (the paper's empty
    token). The answer is one token, ``0`` or ``1``. Tokens: ``0 -> 3``, ``1 -> 4``, ``? -> 5``,
    ``_ -> 6``. Examples (the paper's): ``BOS 0 1 1 0 0 1 ? 0 SEP`` -> ``1``,
    ``BOS 1 0 1 1 ? 1 _ SEP`` -> ``0``. The model must find the token ``length // 2`` places
    from the ``?``, before or after it.
    """

    fixed_num_symbols = len(SYMBOLS)
    default_train_lengths = (2, 21)  # an odd longest length, so that "_" occurs in training
    default_eval_lengths = (11, 21, 31, 41)

    min_length = 2
    min_length_why = "a string of at least one bit, twice"

    def answer_length(self, length: int) -> int:
        return 1

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        half = length // 2
        bits = torch.randint(ZERO, ONE + 1, (batch, half), generator=generator)
        doubled = bits.repeat(1, 2)  # [b, 2 * half]
        hidden = torch.randint(0, 2 * half, (batch, 1), generator=generator)
        answer = doubled.gather(1, hidden)  # [b, 1]
        doubled.scatter_(1, hidden, MISSING)
        padding = torch.full((batch, length % 2), EMPTY)
        return torch.cat((doubled, padding), dim=1), answer

    def solve(self, prompt: Tensor) -> Tensor:
        half = prompt.shape[1] // 2
        first, second = prompt[:, :half], prompt[:, half : 2 * half]
        known = torch.where(first == MISSING, second, first)  # [b, half]: w with the hole filled
        hole = ((first == MISSING) | (second == MISSING)).long().argmax(dim=1, keepdim=True)
        return known.gather(1, hole)

    @staticmethod
    def reference(prompt: list[int]) -> list[int]:
        half = len(prompt) // 2
        hole = prompt.index(MISSING)
        return [prompt[hole + half] if hole < half else prompt[hole - half]]
