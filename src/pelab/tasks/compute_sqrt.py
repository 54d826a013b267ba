"""Compute sqrt (Deletang et al. 2023, context-sensitive): the floor of the square root of a
binary number."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from pelab.tasks.addition import add_little_endian
from pelab.tasks.base import Task, register_task
from pelab.tasks.binary_addition import ONE, ZERO


@register_task("compute_sqrt")
class ComputeSqrtTask(Task):
    """``x -> floor(sqrt(x))``, both in big-endian binary, as in the paper (its ``ComputeSqrt``);
    length axis: bits of ``x``.

    ``x`` is uniform on ``[1, 2^length - 1]``, written with ``length`` bits (leading zeros kept);
    the answer is ``floor(sqrt(x))`` with ``ceil(length / 2)`` bits (the root of a ``length``-bit
    number has at most that many), leading zeros kept. Tokens: ``0 -> 3``, ``1 -> 4``.
    Example: ``BOS 1 0 0 1 0 1 SEP`` (37) -> ``1 1 0`` (6). Length 1 has one prompt, ``1 -> 1``.

    Solved digit by digit, two bits of ``x`` per bit of the root, all samples at once: with the
    root ``q`` and remainder ``r`` so far, bring down the next two bits (``r <- 4 r + pair``);
    the next root bit is 1 iff ``r >= 4 q + 1``, then ``r <- r - (4 q + 1)``. The subtraction is
    an addition of ``2^w - (4 q + 1)``, whose bits are ``1 1`` then the complement of ``q``
    (``w`` bits, least significant first), and its carry out says whether ``r >= 4 q + 1``.
    """

    fixed_num_symbols = 2  # 0, 1
    digit_tokens = (ZERO, ONE)
    length_axis = "bits"
    default_train_lengths = (1, 16)

    def answer_length(self, length: int) -> int:
        return (length + 1) // 2

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        bits = torch.randint(0, 2, (batch, length), generator=generator)
        while True:  # redraw x = 0 (each try fails with p = 2^-length)
            redo = bits.sum(1) == 0
            if not redo.any():
                break
            bits[redo] = torch.randint(0, 2, (int(redo.sum()), length), generator=generator)
        prompt = bits + ZERO
        return prompt, self.solve(prompt)

    def solve(self, prompt: Tensor) -> Tensor:
        batch, length = prompt.shape
        k = (length + 1) // 2  # root bits
        x = F.pad((prompt == ONE).long(), (2 * k - length, 0))  # [b, 2k], most significant first
        width = k + 2  # r < 2^(k+2) throughout (r <= 2 q before bringing down a pair)
        remainder = x.new_zeros(batch, width)  # least significant bit first
        root = x.new_zeros(batch, k)  # least significant bit first
        ones = x.new_ones(batch, 2)
        for i in range(k):
            remainder = torch.cat((x[:, 2 * i : 2 * i + 2].flip(1), remainder[:, :-2]), dim=1)
            minus_trial = torch.cat((ones, 1 - root), dim=1)  # 2^w - (4 q + 1), [b, w]
            total = add_little_endian(remainder, minus_trial, base=2)  # [b, w + 1]
            fits = total[:, width:]  # [b, 1]: the carry out, r >= 4 q + 1
            remainder = torch.where(fits == 1, total[:, :width], remainder)
            root = torch.cat((fits, root[:, :-1]), dim=1)  # q <- 2 q + bit
        return root.flip(1) + ZERO

    @staticmethod
    def reference(prompt: list[int]) -> list[int]:
        x = int("".join(str(t - ZERO) for t in prompt), 2)
        root = f"{math.isqrt(x):b}".zfill((len(prompt) + 1) // 2)
        return [ZERO + int(c) for c in root]
