"""Binary multiplication (Deletang et al. 2023, context-sensitive): two little-endian binary
numbers, multiplied."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from pelab.tasks.addition import add_little_endian
from pelab.tasks.base import Task, register_task
from pelab.tasks.binary_addition import (
    ONE,
    OPERANDS_WHY,
    OPERATOR,
    ZERO,
    end_and_pad,
    operand_bits,
    reference_answer,
    reference_operands,
    sample_operands,
)

TIMES = OPERATOR  # the operator's token, as + in binary_addition


@register_task("binary_multiplication")
class BinaryMultiplicationTask(Task):
    """``x * y`` in little-endian binary, as in the paper (its ``BinaryMultiplication``);
    length axis: prompt tokens (both operands and the ``*``), at least 3.

    The operands are ``binary_addition``'s (the paper's code reuses them): ``x`` gets
    ``n ~ U[1, length - 2]`` bits, ``y`` the other ``length - 1 - n``, each uniform on
    ``[1, 2^bits - 1]``, least significant bit first. The product has at most ``length - 1``
    bits, so the answer has ``length`` tokens (one fewer than addition's): the product least
    significant bit first without trailing zeros, then ``END``, then ``0``s. Tokens: ``0 -> 3``,
    ``1 -> 4``, ``* -> 5``, ``END -> 6``. Example (the paper's): ``BOS 0 0 1 * 0 1 1 0 1 SEP``
    (4 * 22) -> ``0 0 0 1 1 0 1 END 0`` (88).

    The paper scores only the tokens up to ``END``; pelab scores the whole answer, padding
    included, as for ``binary_addition``.

    Solved without a loop over carries: the column sums ``c_k = sum_{i+j=k} x_i y_j`` are
    written in binary, and their bit planes (plane ``t`` shifted by ``t``) are added with
    ``add_little_endian``, one addition per bit of the largest column sum.
    """

    fixed_num_symbols = 4  # 0, 1, *, END
    digit_tokens = (ZERO, ONE)
    default_train_lengths = (3, 16)
    min_length = 3
    min_length_why = OPERANDS_WHY

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        prompt = sample_operands(batch, length, generator)
        return prompt, self.solve(prompt)

    def solve(self, prompt: Tensor) -> Tensor:
        x, y = operand_bits(prompt)  # [b, w] each, w = length - 1: the product fits in w bits
        width = x.shape[1]
        columns = torch.zeros_like(x)  # [b, w]: c_k
        for j in range(width):
            columns[:, j:] += y[:, j : j + 1] * x[:, : width - j]
        product = torch.zeros_like(x)
        for t in range(int(columns.max()).bit_length()):
            plane = F.pad((columns >> t) & 1, (t, 0))[:, :width]  # bit t of c_k, worth 2^(k+t)
            product = add_little_endian(product, plane, base=2)[:, :width]
        return end_and_pad(product, prompt.shape[1])

    @staticmethod
    def reference(prompt: list[int]) -> list[int]:
        x, y = reference_operands(prompt)
        return reference_answer(x * y, len(prompt))
