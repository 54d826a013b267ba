"""Flip-flop: read back the last written bit (Liu et al. 2023, flip-flop language modeling)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pelab.errors import ConfigError
from pelab.tasks.base import Task, register_task
from pelab.tokens import N_SPECIAL

SYMBOLS = ("w", "i", "r", "0", "1")
WRITE, IGNORE, READ, ZERO, ONE = (N_SPECIAL + i for i in range(len(SYMBOLS)))


@register_task("flip_flop")
class FlipFlopTask(Task):
    """``BOS w 1 i 0 r 1 i 1 w 0 i 1 r SEP`` -> ``0`` (the last ``w`` wrote 0).

    A string of the flip-flop language FFL(p) of Liu et al. (2023): ``length`` instructions,
    each followed by a bit. The first instruction is ``w`` (write), the last is ``r`` (read);
    those between are ``i`` (ignore) with probability ``p_ignore`` and ``w`` or ``r`` with
    probability ``(1 - p_ignore) / 2`` each. Bits after ``w`` and ``i`` are uniform; the bit
    after ``r`` is the bit of the latest ``w``. The prompt stops after the last ``r``
    (``2 * length - 1`` tokens) and the answer is its bit. Reads inside the prompt carry their
    (correct) bits, as in the language. The paper scores every read of a 512-token string
    under a language-model loss; here one read, the last, is the answer.

    Splits: the paper trains on FFL(0.8) and tests in distribution (``p_ignore = 0.8``), on
    sparse strings (0.98: writes far back, long-range memory) and on dense ones (0.1: many
    writes and reads). ``p_ignore`` sets the training strings and ``eval_p_ignore`` (default:
    the same) the validation and test strings (``sample_eval``). The length axis is the number
    of instructions (at least 2); chance is 50%. Fixed alphabet ``w i r 0 1``.
    """

    fixed_num_symbols = len(SYMBOLS)
    length_axis = "instructions"
    variants = ({"p_ignore": 0.98}, {"p_ignore": 0.1})  # sparse and dense strings
    default_train_lengths = (2, 20)
    default_eval_lengths = (10, 20, 30, 40)

    def __init__(
        self,
        p_ignore: float = 0.8,
        eval_p_ignore: float | None = None,
        **common: Any,
    ) -> None:
        eval_p_ignore = p_ignore if eval_p_ignore is None else eval_p_ignore
        for key, p in (("p_ignore", p_ignore), ("eval_p_ignore", eval_p_ignore)):
            if not 0.0 <= p <= 1.0:
                raise ConfigError(f"flip_flop: task.{key} must be in [0, 1], got {p}")
        self.p_ignore, self.eval_p_ignore = float(p_ignore), float(eval_p_ignore)
        super().__init__(**common)

    def check_length(self, length: int) -> None:
        if length < 2:
            raise ConfigError(
                f"flip_flop: a string needs at least 2 instructions (a first write, a last "
                f"read), got length {length}"
            )

    def prompt_length(self, length: int) -> int:
        return 2 * length - 1

    def answer_length(self, length: int) -> int:
        return 1

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        return self.sample_language(batch, length, self.p_ignore, generator)

    def sample_eval(
        self, split: str, batch: int, length: int, generator: torch.Generator
    ) -> tuple[Tensor, Tensor]:
        """Evaluation strings (any ``split``): FFL(``eval_p_ignore``)."""
        return self.sample_language(batch, length, self.eval_p_ignore, generator)

    @staticmethod
    def sample_language(
        batch: int, length: int, p_ignore: float, generator: torch.Generator
    ) -> tuple[Tensor, Tensor]:
        """``batch`` strings of FFL(``p_ignore``) with ``length`` instructions, and answers."""
        u = torch.rand(batch, length, generator=generator)
        p_write = (1.0 - p_ignore) / 2
        ops = torch.where(u < p_write, WRITE, torch.where(u < 2 * p_write, READ, IGNORE))
        ops[:, 0], ops[:, -1] = WRITE, READ
        bits = torch.randint(ZERO, ONE + 1, (batch, length), generator=generator)
        step = torch.arange(length).expand(batch, length)
        last_write = torch.where(ops == WRITE, step, 0).cummax(dim=1).values  # [b, n]
        bits = torch.where(ops == READ, bits.gather(1, last_write), bits)
        prompt = torch.stack((ops, bits), dim=2).flatten(1)[:, :-1]  # w b .. r (its bit dropped)
        return prompt, bits[:, -1:]

    def solve(self, prompt: Tensor) -> Tensor:
        ops, bits = prompt[:, 0::2], prompt[:, 1::2]  # [b, n], [b, n - 1]
        step = torch.arange(bits.shape[1]).expand_as(bits)
        last_write = torch.where(ops[:, :-1] == WRITE, step, 0).max(dim=1, keepdim=True).values
        return bits.gather(1, last_write)

    @staticmethod
    def reference(prompt: list[int]) -> list[int]:
        memory = None
        for op, bit in zip(prompt[0::2], prompt[1::2], strict=False):
            if op == WRITE:
                memory = bit
        return [memory]
