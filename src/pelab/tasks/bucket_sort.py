"""Bucket sort (Deletang et al. 2023, context-sensitive): sort a string over a small alphabet."""

from torch import Tensor

from pelab.tasks.base import Task, register_task


@register_task("bucket_sort")
class BucketSortTask(Task):
    """``BOS 4 2 1 3 0 2 SEP`` -> ``0 1 2 2 3 4`` (symbols compared by token id); length axis:
    prompt tokens. The paper's alphabet of 5 symbols by default: with many repeats per symbol,
    the answer is a run of each symbol whose length is its count in the prompt, so the model
    must count occurrences and place each run at the right offset (``sort`` with a large
    alphabet is closer to retrieving the next larger symbol)."""

    default_num_symbols = 5

    def solve(self, prompt: Tensor) -> Tensor:
        return prompt.sort(dim=-1).values

    @staticmethod
    def reference(prompt: list[int]) -> list[int]:
        return sorted(prompt)
