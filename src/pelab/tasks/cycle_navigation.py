"""Cycle navigation: the final position of a walk on a cycle of 5 (Deletang et al. 2023)."""

from __future__ import annotations

import torch
from torch import Tensor

from pelab.tasks.base import Task, register_task
from pelab.tokens import N_SPECIAL

CYCLE = 5
MOVES = ("stay", "+1", "-1")
SYMBOLS = (*MOVES, *(str(i) for i in range(CYCLE)))
STAY, RIGHT, LEFT = (N_SPECIAL + i for i in range(len(MOVES)))
POSITION_0 = N_SPECIAL + len(MOVES)  # token of position i: POSITION_0 + i
STEP = {STAY: 0, RIGHT: 1, LEFT: -1}


@register_task("cycle_navigation")
class CycleNavigationTask(Task):
    """``BOS +1 -1 stay -1 -1 SEP`` -> ``3`` (``1 - 1 + 0 - 1 - 1 = -2 = 3 mod 5``).

    The prompt is ``length`` uniform random moves on a cycle of 5 positions, starting at 0; the
    answer is one token, the final position ``(#(+1) - #(-1)) mod 5``. A regular language
    (Deletang et al. 2023, Table 1); chance is about 20%. Fixed alphabet ``stay +1 -1 0 1 2 3 4``.
    """

    fixed_num_symbols = len(SYMBOLS)
    digit_tokens = tuple(range(POSITION_0, POSITION_0 + CYCLE))  # the answer, a number mod 5
    length_axis = "moves"
    default_train_lengths = (1, 20)
    default_eval_lengths = (10, 20, 30, 40)

    def answer_length(self, length: int) -> int:
        return 1

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        prompt = torch.randint(STAY, LEFT + 1, (batch, length), generator=generator)
        return prompt, self.solve(prompt)

    def solve(self, prompt: Tensor) -> Tensor:
        steps = (prompt == RIGHT).long() - (prompt == LEFT).long()  # [b, n] in {-1, 0, 1}
        return POSITION_0 + steps.sum(dim=-1, keepdim=True) % CYCLE

    @staticmethod
    def reference(prompt: list[int]) -> list[int]:
        position = 0
        for move in prompt:
            position = (position + STEP[move]) % CYCLE
        return [POSITION_0 + position]
