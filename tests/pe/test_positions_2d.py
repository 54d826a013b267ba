"""``Positions`` with k-D coordinates (a grid's (row, col)) next to 1-D positions."""

import pytest
import torch

from pelab.errors import ConfigError
from pelab.positions import Positions


def test_offsets_of_grid_positions_are_per_axis():
    q = torch.tensor([[[0, 0], [1, 2]]])  # [1, i=2, 2]
    k = torch.tensor([[[0, 0], [3, 1], [1, 1]]])  # [1, j=3, 2]
    delta = Positions(q, k).delta()
    assert delta.shape == (1, 2, 3, 2)
    assert delta[0].tolist() == [
        [[0, 0], [-3, -1], [-1, -1]],
        [[1, 2], [-2, 1], [0, 1]],
    ]


def test_offsets_of_one_dimensional_positions_keep_their_shape():
    delta = Positions.from_tensor(torch.tensor([[2, 5, 9]])).delta()
    assert delta.tolist() == [[[0, -3, -7], [3, 0, -4], [7, 4, 0]]]


@pytest.mark.parametrize(
    ("shape", "q_shape", "position_dims"),
    [((5,), (1, 5), 1), ((2, 5), (2, 5), 1), ((1, 5, 2), (1, 5, 2), 2), ((3, 5, 3), (3, 5, 3), 3)],
)
def test_a_two_dimensional_tensor_is_batched_one_dimensional_positions(
    shape, q_shape, position_dims
):
    pos = Positions.from_tensor(torch.zeros(shape, dtype=torch.long))
    assert pos.q.shape == q_shape and pos.position_dims == position_dims


def test_require_names_the_reader_and_the_shape_it_got():
    Positions.from_tensor(torch.zeros(1, 4, 2)).require(2, "pe=x")  # no error
    with pytest.raises(ConfigError, match=r"pe=x reads 2-D positions \[b, n, 2\] .* \[1, 4\]"):
        Positions.contiguous(4).require(2, "pe=x")
