"""Parity: is the number of 1s in a binary string even (Deletang et al. 2023, "Parity Check")."""

from __future__ import annotations

import torch
from torch import Tensor

from pelab.tasks.base import Task, register_task
from pelab.tokens import N_SPECIAL

SYMBOLS = ("0", "1", "even", "odd")
ZERO, ONE, EVEN, ODD = (N_SPECIAL + i for i in range(len(SYMBOLS)))


@register_task("parity")
class ParityTask(Task):
    """``BOS 1 0 1 1 SEP`` -> ``odd`` (three 1s); ``BOS 0 1 1 SEP`` -> ``even``.

    The prompt is ``length`` uniform random bits (tokens ``0``/``1``); the answer is one token,
    ``even`` or ``odd``. A regular language (Deletang et al. 2023, Table 1): chance is 50%.
    Fixed alphabet ``0 1 even odd``.
    """

    fixed_num_symbols = len(SYMBOLS)
    length_axis = "bits"
    default_train_lengths = (1, 20)
    default_eval_lengths = (10, 20, 30, 40)

    def answer_length(self, length: int) -> int:
        return 1

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        prompt = torch.randint(ZERO, ONE + 1, (batch, length), generator=generator)
        return prompt, self.solve(prompt)

    def solve(self, prompt: Tensor) -> Tensor:
        ones = (prompt == ONE).sum(dim=-1, keepdim=True)  # [b, 1]
        return torch.where(ones % 2 == 0, EVEN, ODD)

    @staticmethod
    def reference(prompt: list[int]) -> list[int]:
        ones = sum(1 for token in prompt if token == ONE)
        return [EVEN if ones % 2 == 0 else ODD]
