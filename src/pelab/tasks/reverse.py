"""Reverse: the answer is the prompt backwards."""

from torch import Tensor

from pelab.tasks.base import Task, register_task


@register_task("reverse")
class ReverseTask(Task):
    """``BOS a b c SEP`` -> ``c b a``. Answer token ``t`` mirrors prompt token ``length - 1 - t``,
    so the model must locate the separator and count back from it."""

    def solve(self, prompt: Tensor) -> Tensor:
        return prompt.flip(-1)

    @staticmethod
    def reference(prompt: list[int]) -> list[int]:
        return prompt[::-1]
