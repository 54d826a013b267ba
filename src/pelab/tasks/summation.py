"""Summation mod 10 (Kazemnejad et al. 2023): the last digit of a sum of digits."""

import torch
from torch import Tensor

from pelab.tasks.base import Task, register_task
from pelab.tokens import N_SPECIAL


@register_task("summation")
class SummationTask(Task):
    """``length`` terms, each a digit drawn uniformly from 1-9 (as in the NoPE study); the answer
    is one digit, their sum mod 10. Length axis: number of terms. Tokens: ``3 + d`` for digit
    ``d``. Example: ``BOS 3 3 1 8 SEP`` -> ``5`` (15 mod 10). Every term changes the answer, so a
    model must attend to all of them however long the prompt."""

    length_axis = "terms"
    fixed_num_symbols = 10
    digit_tokens = tuple(range(N_SPECIAL, N_SPECIAL + 10))  # each term is a number of one digit

    def answer_length(self, length: int) -> int:
        return 1

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        prompt = torch.randint(N_SPECIAL + 1, N_SPECIAL + 10, (batch, length), generator=generator)
        return prompt, self.solve(prompt)

    def solve(self, prompt: Tensor) -> Tensor:
        return (prompt - N_SPECIAL).sum(dim=1, keepdim=True) % 10 + N_SPECIAL

    @staticmethod
    def reference(prompt: list[int]) -> list[int]:
        return [N_SPECIAL + sum(t - N_SPECIAL for t in prompt) % 10]
