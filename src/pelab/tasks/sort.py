"""Sort: the answer is the prompt in ascending order."""

from torch import Tensor

from pelab.tasks.base import Task, register_task


@register_task("sort")
class SortTask(Task):
    """``BOS c a b a SEP`` -> ``a a b c`` (symbols compared by token id, duplicates kept). Mostly a
    content task: position only matters to know which answer slot comes next."""

    def solve(self, prompt: Tensor) -> Tensor:
        return prompt.sort(dim=-1).values

    @staticmethod
    def reference(prompt: list[int]) -> list[int]:
        return sorted(prompt)
