"""Odds first (Deletang et al. 2023, context-sensitive): the tokens at odd positions, then the
tokens at even positions."""

import torch
from torch import Tensor

from pelab.tasks.base import Task, register_task


@register_task("odds_first")
class OddsFirstTask(Task):
    """``s_1 s_2 .. s_n -> s_1 s_3 s_5 .. s_2 s_4 ..`` (positions counted from 1, as in the
    paper's definition); length axis: prompt tokens. Binary strings by default
    (``num_symbols = 2``). Example with symbols a, b: ``BOS a a a b a a SEP`` ->
    ``a a a a b a``.

    The paper's released code (``neural_networks_chomsky_hierarchy``, ``tasks/cs/odds_first.py``)
    slices ``[1::2]`` then ``[::2]`` on 0-based indices, i.e. puts ``s_2 s_4 ..`` first, while its
    docstring example (``00110101 -> 0100 0111``) follows the definition used here. Both are the
    same task up to which half comes first.
    """

    default_num_symbols = 2

    def solve(self, prompt: Tensor) -> Tensor:
        return torch.cat((prompt[:, 0::2], prompt[:, 1::2]), dim=1)  # [b, ceil(n/2) + floor(n/2)]

    @staticmethod
    def reference(prompt: list[int]) -> list[int]:
        return prompt[0::2] + prompt[1::2]
