"""Selective copy: copy the data tokens scattered among noise (Gu & Dao 2023, Mamba)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pelab.errors import ConfigError
from pelab.tasks.base import Task, register_task
from pelab.tokens import N_SPECIAL

NOISE = N_SPECIAL  # the noise ("blank") symbol; data symbols are the tokens after it


@register_task("selective_copy")
class SelectiveCopyTask(Task):
    """``BOS . c . . a . b . SEP`` -> ``c a b`` (``num_tokens = 3``, ``.`` the noise symbol).

    The prompt has ``length`` tokens: ``num_tokens`` data symbols at uniformly random distinct
    positions, in order, and the noise symbol everywhere else; the answer is the data symbols in
    order, so it has ``num_tokens`` tokens at every length (Gu & Dao 2023's selective copying,
    where 16 tokens hide in 4096). The number of data tokens is fixed, so a longer prompt is a
    sparser one: extrapolation means finding the same few tokens among more noise. The length
    axis is the prompt's tokens (data plus noise); lengths must be at least ``num_tokens``.
    ``num_symbols`` counts the noise symbol: data symbols are uniform over the other
    ``num_symbols - 1``. The noise symbol belongs to the task's alphabet, not the encoder's
    BLANK answer slot. Chance is ``1 / (num_symbols - 1)`` per token.
    """

    length_axis = "tokens (data + noise)"
    default_train_lengths = (4, 16)
    default_eval_lengths = (8, 16, 32, 64)
    default_num_symbols = 17  # 16 data symbols and the noise symbol

    def __init__(
        self,
        num_tokens: int = 4,
        **common: Any,
    ) -> None:
        if num_tokens < 1:
            raise ConfigError(f"selective_copy: task.num_tokens must be >= 1, got {num_tokens}")
        self.num_tokens = int(num_tokens)
        super().__init__(**common)
        if self.num_symbols < 3:
            raise ConfigError(
                "selective_copy: task.num_symbols counts the noise symbol and needs at least two "
                f"data symbols: set it >= 3, got {self.num_symbols}"
            )

    def check_length(self, length: int) -> None:
        super().check_length(length)
        if length < self.num_tokens:
            raise ConfigError(
                f"selective_copy: a prompt of {length} tokens cannot hold task.num_tokens="
                f"{self.num_tokens} data tokens; use lengths >= {self.num_tokens}"
            )

    def answer_length(self, length: int) -> int:
        return self.num_tokens

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        scores = torch.rand(batch, length, generator=generator)  # top k: a uniform subset
        where = scores.topk(self.num_tokens, dim=1).indices.sort(dim=1).values  # [b, k]
        shape = (batch, self.num_tokens)
        data = torch.randint(NOISE + 1, self.vocab_size, shape, generator=generator)
        prompt = torch.full((batch, length), NOISE).scatter(1, where, data)
        return prompt, data

    def solve(self, prompt: Tensor) -> Tensor:
        is_data = prompt != NOISE
        # a stable sort brings the data tokens to the front, in order
        first = is_data.long().sort(dim=1, descending=True, stable=True).indices
        return prompt.gather(1, first[:, : self.num_tokens])

    @staticmethod
    def reference(prompt: list[int]) -> list[int]:
        return [token for token in prompt if token != NOISE]
