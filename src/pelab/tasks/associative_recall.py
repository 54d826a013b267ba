"""Associative recall: key-value pairs, then a key -> its value (Ba et al. 2016; Zoology)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from pelab.errors import ConfigError
from pelab.tasks.base import Task, register_task
from pelab.tokens import N_SPECIAL


@register_task("associative_recall")
class AssociativeRecallTask(Task):
    """``BOS k1 v1 k2 v2 k3 v3 k2 SEP`` -> ``v2``.

    ``length`` pairs of a key and a value, then one of those keys as the query; the answer is
    the value paired with it. Keys are distinct within a prompt (drawn without replacement from
    ``num_keys`` key symbols), values are uniform over ``num_values`` value symbols (repeats
    allowed) and the query is a uniform choice among the prompt's keys. Keys are tokens
    ``N_SPECIAL .. N_SPECIAL + num_keys - 1``, values the ``num_values`` tokens after them, so
    ``num_symbols = num_keys + num_values`` (leave ``task.num_symbols`` out). The length axis is
    the number of pairs: prompt ``2 * length + 1`` tokens, answer 1 token; every length needs
    ``length <= num_keys``. Chance (guessing without the prompt) is ``1 / num_values``.
    """

    length_axis = "key-value pairs"
    default_train_lengths = (1, 16)
    default_eval_lengths = (8, 16, 24, 32)

    def __init__(
        self,
        num_keys: int = 32,
        num_values: int = 32,
        **common: Any,
    ) -> None:
        if num_keys < 1 or num_values < 2:
            raise ConfigError(
                f"associative_recall needs task.num_keys >= 1 and task.num_values >= 2, "
                f"got {num_keys} and {num_values}"
            )
        self.num_keys, self.num_values = int(num_keys), int(num_values)
        self.fixed_num_symbols = self.num_keys + self.num_values
        super().__init__(**common)

    @classmethod
    def settings_at(cls, length: int, directory: Path) -> dict[str, Any]:
        return {"num_keys": length}  # a distinct key per pair

    def check_length(self, length: int) -> None:
        super().check_length(length)
        if length > self.num_keys:
            raise ConfigError(
                f"associative_recall: {length} pairs need {length} distinct keys but "
                f"task.num_keys is {self.num_keys}; raise task.num_keys to at least {length} or "
                "use shorter lengths"
            )

    def prompt_length(self, length: int) -> int:
        return 2 * length + 1

    def answer_length(self, length: int) -> int:
        return 1

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        # the n largest of num_keys uniform draws: a uniform random subset in random order
        scores = torch.rand(batch, self.num_keys, generator=generator)
        keys = N_SPECIAL + scores.topk(length, dim=1).indices  # [b, n], distinct per row
        first_value = N_SPECIAL + self.num_keys
        values = torch.randint(
            first_value, first_value + self.num_values, (batch, length), generator=generator
        )
        pick = torch.randint(0, length, (batch, 1), generator=generator)
        pairs = torch.stack((keys, values), dim=2).flatten(1)  # k1 v1 k2 v2 ..
        prompt = torch.cat((pairs, keys.gather(1, pick)), dim=1)
        return prompt, values.gather(1, pick)

    def solve(self, prompt: Tensor) -> Tensor:
        keys, values, query = prompt[:, 0:-1:2], prompt[:, 1::2], prompt[:, -1:]
        where = (keys == query).long().argmax(dim=1, keepdim=True)  # [b, 1]
        return values.gather(1, where)

    @staticmethod
    def reference(prompt: list[int]) -> list[int]:
        keys, values, query = prompt[0:-1:2], prompt[1::2], prompt[-1]
        return [values[keys.index(query)]]
