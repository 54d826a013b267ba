"""Copy: the answer repeats the prompt."""

from torch import Tensor

from pelab.tasks.base import Task, register_task


@register_task("copy")
class CopyTask(Task):
    """``BOS a b c SEP`` -> ``a b c``. Solving it needs each answer token to find the prompt token
    exactly ``length + 1`` positions back: a pure test of positional addressing."""

    def solve(self, prompt: Tensor) -> Tensor:
        return prompt.clone()

    @staticmethod
    def reference(prompt: list[int]) -> list[int]:
        return list(prompt)
