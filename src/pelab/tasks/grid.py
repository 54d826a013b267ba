"""Grid: a square grid of symbols is transposed (or copied); the task for 2-D encodings."""

from __future__ import annotations

from collections.abc import Callable
from math import isqrt
from typing import Any, Literal

import torch
from einops import rearrange
from torch import Tensor

from pelab.errors import ConfigError
from pelab.tasks.base import Task, register_task

GridMode = Literal["transpose", "copy"]  # task.mode: SOLVERS' and REFERENCES' keys
# mode -> the answer grid from the prompt grid, vectorised over ``[b, side, side]``
SOLVERS: dict[str, Callable[[Tensor], Tensor]] = {
    "transpose": lambda grid: grid.transpose(-1, -2),
    "copy": lambda grid: grid.clone(),
}
# mode -> the same in plain Python, on a list of rows (the reference the tests trust)
REFERENCES: dict[str, Callable[[list[list[int]]], list[list[int]]]] = {
    "transpose": lambda rows: [[row[c] for row in rows] for c in range(len(rows))],
    "copy": lambda rows: [list(row) for row in rows],
}


def grid_side(cells: int) -> int:
    """The side of a square grid of ``cells`` cells."""
    side = isqrt(cells)
    if side * side != cells:
        raise ConfigError(f"a grid has side x side cells; {cells} is not a square")
    return side


@register_task("grid")
class GridTask(Task):
    """A ``side x side`` grid of random symbols; the answer is the grid transposed
    (``mode=transpose``, ``a[r][c] = p[c][r]``) or copied (``mode=copy``). The task's length axis
    is the side: ``train_lengths``/``eval_lengths`` are sides, prompt and answer have ``side²``
    tokens each, both grids read row by row: ``BOS p00 p01 .. p(s-1)(s-1) SEP a00 .. a(s-1)(s-1)``.

    Coordinates (row, col) of the ``2 s² + 2`` tokens place both grids on one canvas, side by
    side, with BOS and SEP in the columns before each grid (here ``s = 2``)::

        col:    0    1    2    3    4    5
        row 0:  BOS  p00  p01  SEP  a00  a01
        row 1:       p10  p11       a10  a11

    BOS ``(0, 0)``, prompt cell ``(r, c)`` at ``(r, 1 + c)``, SEP ``(0, s + 1)``, answer cell
    ``(r, c)`` at ``(r, s + 2 + c)``. Row 0 reads like the 1-D sequence ``BOS p SEP a`` of one grid
    row; the answer grid sits ``s + 1`` columns right of the prompt grid, as a 1-D copy's answer
    sits ``n + 1`` tokens after its prompt. In a decoder the token that predicts answer cell
    ``(r, c)`` is the one before it in the sequence: SEP for the first cell, the cell to its left
    within a row, the previous row's last cell at a row's start. Copy is the fixed offset
    ``(0, s + 1)``; transpose maps ``(r, c)`` to ``(c, r)`` and so needs absolute coordinates
    (relative encodings can read them off the offset to BOS at ``(0, 0)``).
    """

    length_axis = "grid side"
    position_dims = 2
    default_train_lengths = (2, 5)
    default_eval_lengths = (3, 5, 6, 8)
    variants = ({"mode": "copy"},)

    def __init__(self, mode: GridMode = "transpose", **common: Any) -> None:
        """``common``: the options of every task (lengths, num_symbols, n_val, ...)."""
        self.mode = mode
        super().__init__(**common)

    def prompt_length(self, length: int) -> int:
        return length * length

    def answer_length(self, length: int) -> int:
        return length * length

    def solve(self, prompt: Tensor) -> Tensor:
        grid = rearrange(prompt, "b (r c) -> b r c", r=grid_side(prompt.shape[1]))
        return rearrange(SOLVERS[self.mode](grid), "b r c -> b (r c)")

    def reference(self, prompt: list[int]) -> list[int]:
        side = grid_side(len(prompt))
        rows = [prompt[r * side : (r + 1) * side] for r in range(side)]
        return [symbol for row in REFERENCES[self.mode](rows) for symbol in row]

    def coordinates(self, prompt_length: int, answer_length: int) -> Tensor:
        """``[2 s² + 2, 2]`` (row, col) of ``BOS prompt SEP answer``, as in the class docstring."""
        side = grid_side(prompt_length)
        if answer_length != prompt_length:
            raise ConfigError(
                f"a grid's answer has as many cells as its prompt ({prompt_length}), "
                f"got {answer_length}"
            )
        rows, cols = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
        cells = torch.stack((rows.flatten(), cols.flatten()), dim=-1)  # [s², 2], row by row
        bos, sep = torch.tensor([[0, 0]]), torch.tensor([[0, side + 1]])
        shift = torch.tensor([0, 1])  # one column right per step: prompt at 1, answer at s + 2
        return torch.cat((bos, cells + shift, sep, cells + (side + 2) * shift))
