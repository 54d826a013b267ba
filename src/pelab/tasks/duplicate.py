"""Duplicate string (Deletang et al. 2023, context-sensitive): ``w -> w w``."""

from torch import Tensor

from pelab.tasks.base import Task, register_task


@register_task("duplicate")
class DuplicateTask(Task):
    """``BOS a b b SEP`` -> ``a b b a b b``; length axis: prompt tokens, answer ``2 * length``
    tokens. Binary strings by default (``num_symbols = 2``, as in the paper; symbols are token
    ids 3 and 4). The second copy needs tokens ``2 * length + 1`` positions back, twice the
    offset of ``copy``, so a model must address by position relative to the separator."""

    default_num_symbols = 2

    def answer_length(self, length: int) -> int:
        return 2 * length

    def solve(self, prompt: Tensor) -> Tensor:
        return prompt.repeat(1, 2)

    @staticmethod
    def reference(prompt: list[int]) -> list[int]:
        return prompt + prompt
