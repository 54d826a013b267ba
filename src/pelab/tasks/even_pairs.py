"""Even pairs: is the number of ``ab`` and ``ba`` pairs even (Deletang et al. 2023)."""

from __future__ import annotations

import torch
from torch import Tensor

from pelab.tasks.base import Task, register_task
from pelab.tokens import N_SPECIAL

SYMBOLS = ("a", "b", "even", "odd")
A, B, EVEN, ODD = (N_SPECIAL + i for i in range(len(SYMBOLS)))


@register_task("even_pairs")
class EvenPairsTask(Task):
    """``BOS a a b b a SEP`` -> ``even`` (one ``ab``, one ``ba``); ``BOS a b b SEP`` -> ``odd``.

    The prompt is ``length`` uniform random letters ``a``/``b``; the answer is one token, ``even``
    if the adjacent pairs ``ab`` plus ``ba`` are even in number, else ``odd``. Every change of
    letter is one such pair, so the count is even exactly when the first and last letters agree:
    a regular language that needs only two positions, the first and the last (Deletang et al.
    2023, Table 1). Chance is 50%. Fixed alphabet ``a b even odd``.
    """

    fixed_num_symbols = len(SYMBOLS)
    length_axis = "letters"
    default_train_lengths = (1, 20)
    default_eval_lengths = (10, 20, 30, 40)

    def answer_length(self, length: int) -> int:
        return 1

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        prompt = torch.randint(A, B + 1, (batch, length), generator=generator)
        return prompt, self.solve(prompt)

    def solve(self, prompt: Tensor) -> Tensor:
        changes = (prompt[:, 1:] != prompt[:, :-1]).sum(dim=-1, keepdim=True)  # [b, 1]
        return torch.where(changes % 2 == 0, EVEN, ODD)

    @staticmethod
    def reference(prompt: list[int]) -> list[int]:
        pairs = list(zip(prompt, prompt[1:], strict=False))
        count = pairs.count((A, B)) + pairs.count((B, A))
        return [EVEN if count % 2 == 0 else ODD]
