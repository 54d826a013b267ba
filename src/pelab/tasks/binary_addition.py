"""Binary addition (Deletang et al. 2023, context-sensitive): two little-endian binary numbers."""

from __future__ import annotations

import torch
from torch import Tensor

from pelab.errors import ConfigError
from pelab.tasks.addition import add_little_endian
from pelab.tasks.base import Task, register_task
from pelab.tokens import N_SPECIAL

ZERO, ONE, PLUS, END = N_SPECIAL, N_SPECIAL + 1, N_SPECIAL + 2, N_SPECIAL + 3


@register_task("binary_addition")
class BinaryAdditionTask(Task):
    """``x + y`` in little-endian binary, as in the paper; length axis: prompt tokens (both
    operands and the ``+``), at least 3.

    Per sample, ``x`` gets ``n ~ U[1, length - 2]`` bits and ``y`` the other ``length - 1 - n``;
    each operand is drawn uniformly from ``[1, 2^bits - 1]`` (zero is excluded, as in the
    paper's code) and written least significant bit first, zero-padded to its bits. The answer
    (``length + 1`` tokens) is the sum, least significant bit first without trailing zeros
    (``0`` for zero), then ``END``, then ``0``s. Tokens: ``0 -> 3``, ``1 -> 4``, ``+ -> 5``,
    ``END -> 6``. Example (the paper's): ``BOS 0 0 1 + 0 1 1 0 1 SEP`` (4 + 22) ->
    ``0 1 0 1 1 END 0 0 0 0`` (26).

    The paper scores only the tokens up to ``END``; pelab scores the whole answer, so the
    padding zeros count (the computed chance level shows how much that inflates token accuracy).
    """

    fixed_num_symbols = 4  # 0, 1, +, END
    digit_tokens = (ZERO, ONE)
    default_train_lengths = (3, 16)

    def check_length(self, length: int) -> None:
        if length < 3:
            raise ConfigError(
                f"BinaryAdditionTask: lengths must be >= 3 (two operands of at least one bit "
                f"and the +), got {length}"
            )

    def answer_length(self, length: int) -> int:
        return length + 1

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        split = torch.randint(1, length - 1, (batch, 1), generator=generator)  # bits of x
        positions = torch.arange(length).expand(batch, length)
        bits = torch.randint(0, 2, (batch, length), generator=generator)
        while True:  # redraw operands that came out zero (each try fails with p <= 1/2)
            x_zero = ((bits == 1) & (positions < split)).sum(1) == 0
            y_zero = ((bits == 1) & (positions > split)).sum(1) == 0
            redo = x_zero | y_zero
            if not redo.any():
                break
            bits[redo] = torch.randint(0, 2, (int(redo.sum()), length), generator=generator)
        prompt = torch.where(positions == split, PLUS, bits + ZERO)
        return prompt, self.solve(prompt)

    def solve(self, prompt: Tensor) -> Tensor:
        batch, length = prompt.shape
        split = (prompt == PLUS).long().argmax(dim=1, keepdim=True)  # [b, 1]
        k = torch.arange(length - 1, device=prompt.device).expand(batch, -1)
        bits = (prompt == ONE).long()
        x = bits[:, : length - 1] * (k < split)
        y = bits.gather(1, (split + 1 + k).clamp(max=length - 1)) * (k < length - 1 - split)
        total = add_little_endian(x, y, base=2)  # [b, length], LSB first
        j = torch.arange(length + 1, device=prompt.device).expand(batch, -1)
        size = (torch.where(total == 1, j[:, :length] + 1, 0).amax(1, keepdim=True)).clamp(min=1)
        padded = torch.cat((total, torch.zeros_like(total[:, :1])), dim=1)
        return torch.where(j < size, padded + ZERO, torch.where(j == size, END, ZERO))

    @staticmethod
    def reference(prompt: list[int]) -> list[int]:
        text = "".join({ZERO: "0", ONE: "1", PLUS: "+"}[t] for t in prompt)
        x, y = (int(bits[::-1], 2) for bits in text.split("+"))
        answer = [ZERO + int(c) for c in f"{x + y:b}"[::-1]] + [END]
        return answer + [ZERO] * (len(prompt) + 1 - len(answer))
