import math

import pytest
import torch

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims
from pelab.pe.rope_2d import AxialRotaryPE
from pelab.pe.rotary import RotaryPE
from pelab.positions import Positions


def dims(head_dim: int, heads: int = 1, position_dims: int = 2) -> ModelDims:
    return ModelDims(head_dim * heads, heads, 1, True, 64, 10, position_dims)


def grid_positions(coords) -> Positions:
    return Positions.from_tensor(torch.as_tensor(coords)[None])  # [1, n, 2]


def scores(pe, q, k, pos: Positions) -> torch.Tensor:
    rq, rk = pe.transform_qk(q, k, pos, 0)
    return rq @ rk.transpose(-1, -2)


def test_first_pair_turns_with_the_row_second_with_the_column():
    pe = AxialRotaryPE(dims(4), base=100.0)  # one pair per axis, theta_0 = 1
    x = torch.tensor([1.0, 0.0, 1.0, 0.0]).expand(1, 1, 2, 4)
    out, _ = pe.transform_qk(x, x, grid_positions([[0, 0], [1, 2]]), 0)
    expected = [[1.0, 0.0, 1.0, 0.0], [math.cos(1), math.sin(1), math.cos(2), math.sin(2)]]
    assert torch.allclose(out[0, 0], torch.tensor(expected), atol=1e-6)


def test_each_axis_uses_base_to_the_minus_4t_over_r():
    pe = AxialRotaryPE(dims(8), base=100.0)  # r = 8: two frequencies per axis
    assert torch.allclose(pe.inv_freq, torch.tensor([1.0, 100**-0.5]))


def test_each_half_is_one_dimensional_rope_of_its_axis():
    torch.manual_seed(0)
    axial, rope = AxialRotaryPE(dims(16)), RotaryPE(dims(8, position_dims=1), base=100.0)
    x = torch.randn(2, 1, 6, 16)
    coords = torch.randint(0, 40, (2, 6, 2))
    out, _ = axial.transform_qk(x, x, Positions.from_tensor(coords), 0)
    for axis, half in ((0, slice(0, 8)), (1, slice(8, 16))):
        along = Positions(coords[..., axis], coords[..., axis])
        expected, _ = rope.transform_qk(x[..., half], x[..., half], along, 0)
        assert torch.allclose(out[..., half], expected, atol=1e-5)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_score_depends_only_on_the_row_and_column_offsets(layout, fraction):
    torch.manual_seed(0)
    pe = AxialRotaryPE(dims(16, heads=2), layout=layout, fraction=fraction)
    q, k = torch.randn(1, 2, 7, 16), torch.randn(1, 2, 7, 16)
    coords = torch.randint(0, 6, (7, 2))
    base = scores(pe, q, k, grid_positions(coords))
    for shift in ([3, 0], [0, 5], [11, 7], [-2, 40]):
        shifted = scores(pe, q, k, grid_positions(coords + torch.tensor(shift)))
        assert torch.allclose(base, shifted, atol=1e-4), shift
    assert not torch.allclose(base, q @ k.transpose(-1, -2), atol=1e-3)  # positions do matter


def test_row_and_column_offsets_are_told_apart():
    torch.manual_seed(1)
    pe = AxialRotaryPE(dims(8))
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)
    down = scores(pe, q, k, Positions(torch.tensor([[[1, 0]]]), torch.tensor([[[0, 0]]])))
    right = scores(pe, q, k, Positions(torch.tensor([[[0, 1]]]), torch.tensor([[[0, 0]]])))
    assert not torch.allclose(down, right, atol=1e-3)


def test_rotation_preserves_norms():
    pe = AxialRotaryPE(dims(16))
    x = torch.randn(2, 1, 5, 16)
    out, _ = pe.transform_qk(x, x, Positions.from_tensor(torch.randint(0, 30, (2, 5, 2))), 0)
    assert torch.allclose(out.norm(dim=-1), x.norm(dim=-1), atol=1e-5)


@pytest.mark.parametrize(("head_dim", "fraction"), [(6, 1.0), (8, 0.25), (16, 0.375)])
def test_rotated_dims_must_split_evenly_between_the_axes(head_dim, fraction):
    with pytest.raises(ConfigError, match=r"pe=rope_2d .* multiple of 4"):
        AxialRotaryPE(dims(head_dim), fraction=fraction)


def test_one_dimensional_positions_are_refused_clearly():
    pe = AxialRotaryPE(dims(8))
    x = torch.randn(1, 1, 5, 8)
    with pytest.raises(ConfigError, match=r"pe=rope_2d reads 2-D positions"):
        pe.transform_qk(x, x, Positions.contiguous(5), 0)
