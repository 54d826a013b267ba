"""Stack manipulation: run PUSH/POP actions on a given stack (Deletang et al. 2023)."""

from __future__ import annotations

import torch
from torch import Tensor

from pelab.tasks.base import Task, register_task
from pelab.tokens import N_SPECIAL

SYMBOLS = ("0", "1", "POP", "PUSH0", "PUSH1", "_")
ZERO, ONE, POP, PUSH0, PUSH1, EMPTY = (N_SPECIAL + i for i in range(len(SYMBOLS)))


@register_task("stack_manipulation")
class StackManipulationTask(Task):
    """A stack of bits, given bottom to top, then actions -> the final stack, top to bottom.

    ``BOS 0 1 1 0 PUSH1 POP POP SEP`` -> ``1 1 0 _ _ _ _ _`` (the stack ``0 1 1 0``; ``PUSH1``
    makes it ``0 1 1 0 1``, two ``POP`` leave ``0 1 1``, read from the top). As in Deletang et al.
    (2023): the initial stack has ``k ~ U{1 .. length - 1}`` uniform bits, the other
    ``length - k`` tokens are uniform actions ``POP``/``PUSH0``/``PUSH1``; a ``POP`` on an empty
    stack does nothing; length 1 is a one-bit stack and no action. The answer has ``length + 1``
    tokens: the final stack top to bottom, then ``_`` up to the end (the paper writes one
    terminator then pads; here the terminator and the padding are the same token). The paper's
    accuracy ignores the slots after the terminator; here exact match is unaffected, but token
    accuracy also counts the ``_`` slots, which makes it higher than the paper's.
    A deterministic context-free task; the length axis is the prompt's tokens (stack plus
    actions). Fixed alphabet ``0 1 POP PUSH0 PUSH1 _``.

    Solved in parallel: with pushes ``+1`` (the initial bits are pushes too) and pops ``-1``,
    the height after step ``t`` is ``h_t = S_t - min(0, min_{s<=t} S_s)`` (``S`` the running sum;
    pops on an empty stack clamp at 0), and the push at step ``t`` survives to the end iff
    ``min_{s>=t} h_s = h_t``; it is then ``H - h_t`` places below the final top ``H``.
    """

    fixed_num_symbols = len(SYMBOLS)
    length_axis = "tokens (stack + actions)"
    default_train_lengths = (1, 20)
    default_eval_lengths = (10, 20, 30, 40)

    def answer_length(self, length: int) -> int:
        return length + 1

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        bits = torch.randint(ZERO, ONE + 1, (batch, length), generator=generator)
        actions = torch.randint(POP, PUSH1 + 1, (batch, length), generator=generator)
        stack_size = torch.randint(1, max(length, 2), (batch, 1), generator=generator)
        prompt = torch.where(torch.arange(length) < stack_size, bits, actions)
        return prompt, self.solve(prompt)

    def solve(self, prompt: Tensor) -> Tensor:
        b, n = prompt.shape
        push = prompt != POP  # [b, n]: initial bits and PUSH actions
        running = torch.where(push, 1, -1).cumsum(dim=1)
        height = running - running.cummin(dim=1).values.clamp(max=0)  # [b, n], clamped at 0
        lowest_after = height.flip(1).cummin(dim=1).values.flip(1)  # min_{s >= t} h_s
        survives = push & (lowest_after == height)
        bit = torch.where((prompt == ONE) | (prompt == PUSH1), ONE, ZERO)
        depth = height[:, -1:] - height  # [b, n]: places below the final top
        answer = torch.full((b, n + 2), EMPTY)  # column n + 1 collects the non-survivors
        answer.scatter_(1, torch.where(survives, depth, n + 1), torch.where(survives, bit, EMPTY))
        return answer[:, : n + 1]

    @staticmethod
    def reference(prompt: list[int]) -> list[int]:
        stack: list[int] = []
        for token in prompt:
            if token in (ZERO, ONE):
                stack.append(token)
            elif token == POP:
                if stack:
                    stack.pop()
            else:
                stack.append(ZERO if token == PUSH0 else ONE)
        return stack[::-1] + [EMPTY] * (len(prompt) + 1 - len(stack))
