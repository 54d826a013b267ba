"""Multi-digit addition (Kazemnejad et al. 2023; reversed answers as in Zhou et al. 2024 and
McLeish et al. 2024)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pelab.tasks.base import Task, register_task
from pelab.tokens import N_SPECIAL

PLUS = N_SPECIAL + 10  # digits d are token ids N_SPECIAL + d
END = N_SPECIAL + 11  # fills the answer after a sum written without leading zeros


def add_little_endian(x: Tensor, y: Tensor, base: int) -> Tensor:
    """Digit-wise sum of two little-endian numbers ``[b, L]`` -> ``[b, L + 1]`` digits.

    Vectorised carries, no loop over digits: the carry out of digit ``i`` is decided by the last
    digit ``j <= i`` whose column sum ``s_j = x_j + y_j`` is not ``base - 1`` (a column summing
    to ``base - 1`` passes its incoming carry on): it is 1 if ``s_j >= base``, else 0.
    """
    s = x + y  # [b, L]
    positions = torch.arange(s.shape[1], device=s.device).expand_as(s)
    decisive = torch.where(s != base - 1, positions, -1).cummax(dim=1).values  # last j <= i
    carry_out = (s.gather(1, decisive.clamp(min=0)) >= base) & (decisive >= 0)
    carry_in = torch.cat((torch.zeros_like(carry_out[:, :1]), carry_out[:, :-1]), dim=1)
    return torch.cat(((s + carry_in) % base, carry_out[:, -1:].long()), dim=1)


@register_task("addition")
class AdditionTask(Task):
    """``a + b`` for two ``length``-digit numbers; length axis: digits per operand.

    Operands are drawn uniformly from ``[0, 10^length)`` and written most significant digit
    first, zero-padded to ``length`` digits (token id ``3 + d`` for digit ``d``, ``13`` for
    ``+``). Prompt: ``a + b`` (``2 * length + 1`` tokens); answer: the sum as ``length + 1``
    digits, zero-padded, most significant first, or least significant first with
    ``reverse_answer: true`` (then each answer digit depends only on digits already seen, the
    format that lets a causal decoder add from the right). Example, ``length = 3``:
    ``BOS 4 7 5 + 0 6 8 SEP`` -> ``0 5 4 3`` (475 + 68 = 543), reversed ``3 4 5 0``.

    ``leading_zeros: false`` writes numbers as the NoPE study does: each operand has exactly
    ``length`` digits, drawn uniformly from ``[10^(length-1), 10^length)`` (0-9 at length 1),
    and the sum is written without leading zeros, then ``END`` (a symbol of its own) fills the
    answer's ``length + 1`` slots, as the study's end-of-sequence token closes its answer:
    ``BOS 4 7 5 + 1 6 8 SEP`` -> ``6 4 3 END``. (The study also pairs operands of different
    digit counts; pelab's batches hold one prompt length, so both operands have ``length``.)
    ``solve`` and ``reference`` agree on every prompt ``sample`` draws: operands of exactly
    ``length`` digits (a prompt with a leading zero is not a sample of this setting).
    """

    length_axis = "digits per operand"
    fixed_num_symbols = 11  # 0-9 and +
    digit_tokens = tuple(range(N_SPECIAL, N_SPECIAL + 10))
    default_train_lengths = (1, 8)
    default_eval_lengths = (4, 8, 12, 16)
    variants = ({"reverse_answer": True}, {"leading_zeros": False})

    def __init__(self, reverse_answer: bool = False, leading_zeros: bool = True, **kwargs: Any):
        self.reverse_answer = bool(reverse_answer)
        self.leading_zeros = bool(leading_zeros)
        super().__init__(**kwargs)

    @property
    def vocab_size(self) -> int:
        return super().vocab_size + (not self.leading_zeros)  # END

    def prompt_length(self, length: int) -> int:
        return 2 * length + 1

    def answer_length(self, length: int) -> int:
        return length + 1

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        digits = torch.randint(0, 10, (batch, 2 * length + 1), generator=generator)
        if not self.leading_zeros and length > 1:  # a first digit of 1-9
            first = torch.randint(1, 10, (batch, 2), generator=generator)
            digits[:, [0, length + 1]] = first
        digits[:, length] = PLUS - N_SPECIAL
        prompt = digits + N_SPECIAL
        return prompt, self.solve(prompt)

    def solve(self, prompt: Tensor) -> Tensor:
        length = prompt.shape[1] // 2
        a, b = prompt[:, :length] - N_SPECIAL, prompt[:, length + 1 :] - N_SPECIAL
        total = add_little_endian(a.flip(1), b.flip(1), base=10)  # [b, length + 1], LSD first
        if self.leading_zeros:
            return (total if self.reverse_answer else total.flip(1)) + N_SPECIAL
        # unpadded: the carry digit only when it is 1 (operands have no leading zeros)
        keep = torch.ones_like(total, dtype=torch.bool)
        keep[:, -1] = total[:, -1] != 0
        digits = total if self.reverse_answer else total.flip(1)
        keep = keep if self.reverse_answer else keep.flip(1)
        order = (~keep).long().argsort(dim=1, stable=True)  # kept digits first, in order
        return torch.where(keep, digits + N_SPECIAL, END).gather(1, order)

    def reference(self, prompt: list[int]) -> list[int]:
        length = len(prompt) // 2
        text = "".join("+" if t == PLUS else str(t - N_SPECIAL) for t in prompt)
        a, b = text.split("+")
        assert len(a) == len(b) == length
        if self.leading_zeros:
            answer = str(int(a) + int(b)).zfill(length + 1)
        else:
            answer = str(int(a) + int(b))
        answer = answer[::-1] if self.reverse_answer else answer
        return [N_SPECIAL + int(c) for c in answer] + [END] * (length + 1 - len(answer))
