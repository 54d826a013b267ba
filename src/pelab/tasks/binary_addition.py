"""Binary addition (Deletang et al. 2023, context-sensitive): two little-endian binary numbers.

The helpers here are shared with ``binary_multiplication``: the same operands (the paper's
``binary_addition`` generator, which its multiplication reuses) and the same answer format."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from pelab.tasks.addition import add_little_endian
from pelab.tasks.base import Task, register_task
from pelab.tokens import N_SPECIAL

ZERO, ONE, OPERATOR, END = N_SPECIAL, N_SPECIAL + 1, N_SPECIAL + 2, N_SPECIAL + 3
PLUS = OPERATOR  # the operator's token: + here, * in binary_multiplication
OPERANDS_WHY = "two operands of at least one bit and the operator"  # the shortest prompt


def sample_operands(batch: int, length: int, generator: torch.Generator) -> Tensor:
    """``batch`` prompts ``x OPERATOR y`` of ``length`` tokens, ``[b, length]``: ``x`` has
    ``n ~ U[1, length - 2]`` bits, ``y`` the other ``length - 1 - n``, each operand is uniform on
    ``[1, 2^bits - 1]``, least significant bit first, zero-padded to its bits."""
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
    return torch.where(positions == split, OPERATOR, bits + ZERO)


def operand_bits(prompt: Tensor) -> tuple[Tensor, Tensor]:
    """The operands of ``x OPERATOR y`` prompts ``[b, n]`` as little-endian bits, each
    ``[b, n - 1]`` and zero above its own bits."""
    batch, length = prompt.shape
    split = (prompt == OPERATOR).long().argmax(dim=1, keepdim=True)  # [b, 1]
    k = torch.arange(length - 1, device=prompt.device).expand(batch, -1)
    bits = (prompt == ONE).long()
    x = bits[:, : length - 1] * (k < split)
    y = bits.gather(1, (split + 1 + k).clamp(max=length - 1)) * (k < length - 1 - split)
    return x, y


def end_and_pad(bits: Tensor, size: int) -> Tensor:
    """Little-endian bits ``[b, w]`` (``w < size``) -> the answer ``[b, size]``: the bits
    without trailing zeros (``0`` for zero), ``END``, then ``0``s."""
    batch, width = bits.shape
    j = torch.arange(size, device=bits.device).expand(batch, -1)
    kept = torch.where(bits == 1, j[:, :width] + 1, 0).amax(1, keepdim=True).clamp(min=1)
    digits = F.pad(bits, (0, size - width))  # [b, size]
    return torch.where(j < kept, digits + ZERO, torch.where(j == kept, END, ZERO))


def reference_operands(prompt: list[int]) -> tuple[int, int]:
    """``x OPERATOR y`` (little-endian bit tokens) -> the integers ``x`` and ``y``."""
    text = "".join({ZERO: "0", ONE: "1", OPERATOR: "+"}[t] for t in prompt)
    x, y = (int(bits[::-1], 2) for bits in text.split("+"))
    return x, y


def reference_answer(value: int, size: int) -> list[int]:
    """``value`` little-endian without trailing zeros, ``END``, then ``0``s: ``size`` tokens."""
    answer = [ZERO + int(c) for c in f"{value:b}"[::-1]] + [END]
    return answer + [ZERO] * (size - len(answer))


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
    min_length = 3
    min_length_why = OPERANDS_WHY

    def answer_length(self, length: int) -> int:
        return length + 1

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        prompt = sample_operands(batch, length, generator)
        return prompt, self.solve(prompt)

    def solve(self, prompt: Tensor) -> Tensor:
        x, y = operand_bits(prompt)
        total = add_little_endian(x, y, base=2)  # [b, length], LSB first
        return end_and_pad(total, prompt.shape[1] + 1)

    @staticmethod
    def reference(prompt: list[int]) -> list[int]:
        x, y = reference_operands(prompt)
        return reference_answer(x + y, len(prompt) + 1)
