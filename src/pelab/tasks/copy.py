"""Copy: the answer repeats the prompt (Kazemnejad et al. 2023, the NoPE study's copy tasks)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pelab.pe.base import ConfigError
from pelab.tasks.base import N_SPECIAL, Task, register_task

VARIANTS = ("random", "repeated", "double")


@register_task("copy")
class CopyTask(Task):
    """Copy the prompt; length axis: prompt tokens. ``variant`` picks the data:

    - ``random``: ``length`` symbols drawn uniformly; ``BOS c a b SEP`` -> ``c a b``. Each answer
      token must find the prompt token exactly ``length + 1`` positions back: positional
      addressing.
    - ``repeated``: one symbol repeated; ``BOS a a a SEP`` -> ``a a a``. In the NoPE study the
      hard part is counting (when to stop); here the layout fixes the answer length, so what
      remains is whether every answer slot still retrieves the one symbol at unseen positions:
      a failure can only come from positions.
    - ``double``: the prompt twice, ``BOS a b SEP`` -> ``a b a b`` (answer ``2 * length``
      tokens); as ``duplicate`` but with the copy alphabet.
    """

    variants = ({"variant": "repeated"}, {"variant": "double"})

    def __init__(self, variant: str = "random", **kwargs: Any) -> None:
        if variant not in VARIANTS:
            raise ConfigError(
                f"CopyTask: unknown task.variant {variant!r}; valid choices: {', '.join(VARIANTS)}"
            )
        self.variant = variant
        super().__init__(**kwargs)

    def answer_length(self, length: int) -> int:
        return 2 * length if self.variant == "double" else length

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        if self.variant != "repeated":
            return super().sample(batch, length, generator)
        symbol = torch.randint(N_SPECIAL, self.vocab_size, (batch, 1), generator=generator)
        prompt = symbol.expand(batch, length).contiguous()  # [b, n], one symbol per row
        return prompt, self.solve(prompt)

    def solve(self, prompt: Tensor) -> Tensor:
        return prompt.repeat(1, 2) if self.variant == "double" else prompt.clone()

    def reference(self, prompt: list[int]) -> list[int]:
        return list(prompt) * (2 if self.variant == "double" else 1)

    def spec(self) -> dict[str, Any]:
        return {**super().spec(), "variant": self.variant}
