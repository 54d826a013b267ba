"""Copy: the answer repeats the prompt (Kazemnejad et al. 2023, the NoPE study's copy tasks)."""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor

from pelab.tasks.base import Task, register_task
from pelab.tokens import N_SPECIAL

CopyVariant = Literal["random", "repeated", "double", "double_next"]  # task.variant


@register_task("copy")
class CopyTask(Task):
    """Copy the prompt; length axis: prompt tokens. ``variant`` picks the data:

    - ``random``: ``length`` symbols drawn uniformly; ``BOS c a b SEP`` -> ``c a b``. Each answer
      token must find the prompt token exactly ``length + 1`` positions back: positional
      addressing.
    - ``repeated``: one symbol repeated, then an end marker; ``BOS a a a SEP`` -> ``a a a END``
      (answer ``length + 1`` tokens). The symbol is trivial to retrieve, so what is tested is
      counting: every answer slot must tell whether ``length`` symbols are out already (the
      NoPE study's "when to stop"). ``END`` is a token of its own, after the ``num_symbols``
      prompt symbols.
    - ``double``: the prompt twice, ``BOS a b SEP`` -> ``a b a b`` (answer ``2 * length``
      tokens); as ``duplicate`` but with the copy alphabet.
    - ``double_next``: the prompt twice with a ``NEXT`` token between, ``BOS a b SEP`` ->
      ``a b NEXT a b`` (``2 * length + 1`` tokens), the NoPE study's "copy 2x" (``[NEXT]``).

    ``END`` and ``NEXT`` are tokens of their own, after the ``num_symbols`` prompt symbols.
    """

    variants = ({"variant": "repeated"}, {"variant": "double"}, {"variant": "double_next"})

    def __init__(self, variant: CopyVariant = "random", **kwargs: Any) -> None:
        self.variant = variant
        super().__init__(**kwargs)

    @property
    def end(self) -> int:
        """The marker of ``repeated`` (its end) and ``double_next`` (``NEXT``) answers: the
        token after the prompt symbols."""
        return N_SPECIAL + self.num_symbols

    @property
    def vocab_size(self) -> int:
        return super().vocab_size + (self.variant in ("repeated", "double_next"))

    def answer_length(self, length: int) -> int:
        lengths = {"random": length, "repeated": length + 1, "double": 2 * length}
        return lengths.get(self.variant, 2 * length + 1)

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Prompts of the ``num_symbols`` symbols only (never the marker ``END``/``NEXT``)."""
        if self.variant == "repeated":
            symbol = torch.randint(N_SPECIAL, self.end, (batch, 1), generator=generator)
            prompt = symbol.expand(batch, length).contiguous()  # [b, n], one symbol per row
        else:
            prompt = torch.randint(N_SPECIAL, self.end, (batch, length), generator=generator)
        return prompt, self.solve(prompt)

    def solve(self, prompt: Tensor) -> Tensor:
        marker = prompt.new_full((prompt.shape[0], 1), self.end)
        if self.variant == "repeated":
            return torch.cat((prompt, marker), dim=1)
        if self.variant == "double_next":
            return torch.cat((prompt, marker, prompt), dim=1)
        return prompt.repeat(1, 2) if self.variant == "double" else prompt.clone()

    def reference(self, prompt: list[int]) -> list[int]:
        if self.variant == "repeated":
            return [*prompt, self.end]
        if self.variant == "double_next":
            return [*prompt, self.end, *prompt]
        return list(prompt) * (2 if self.variant == "double" else 1)
