import math

import pytest
import torch

from pelab.errors import ConfigError
from pelab.pe.absolute import sinusoid_table
from pelab.pe.base import ModelDims
from pelab.pe.sinusoidal_2d import Sinusoidal2dPE
from pelab.positions import Positions


def dims(d_model: int) -> ModelDims:
    return ModelDims(d_model, 1, 1, True, 64, 10, position_dims=2)


def table(pe: Sinusoidal2dPE, coords: list[list[int]]) -> torch.Tensor:
    return pe.position_vectors(Positions.from_tensor(torch.tensor([coords])))[0]


def test_exact_values_at_a_hand_computed_point():
    # d_model 8: 4 channels per axis, frequencies 1 and 10000^(-2/4) = 0.01
    out = table(Sinusoidal2dPE(dims(8)), [[1, 2]])[0]
    row = [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)]
    col = [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)]
    assert torch.allclose(out, torch.tensor(row + col), atol=1e-6)


def test_concat_layout_puts_each_axis_sines_before_its_cosines():
    out = table(Sinusoidal2dPE(dims(8), layout="concat"), [[1, 2]])[0]
    row = [math.sin(1), math.sin(0.01), math.cos(1), math.cos(0.01)]
    col = [math.sin(2), math.sin(0.02), math.cos(2), math.cos(0.02)]
    assert torch.allclose(out, torch.tensor(row + col), atol=1e-6)


@pytest.mark.parametrize("layout", ["interleaved", "concat"])
def test_row_sinusoid_on_the_first_half_column_sinusoid_on_the_second(layout):
    pe = Sinusoidal2dPE(dims(32), base=100.0, layout=layout)
    coords = torch.randint(0, 50, (3, 7, 2))
    out = pe.position_vectors(Positions.from_tensor(coords))
    assert out.shape == (3, 7, 32)
    assert torch.equal(out[..., :16], sinusoid_table(coords[..., 0], 16, 100.0, layout))
    assert torch.equal(out[..., 16:], sinusoid_table(coords[..., 1], 16, 100.0, layout))


def test_row_and_column_are_told_apart():
    out = table(Sinusoidal2dPE(dims(16)), [[1, 2], [2, 1]])
    assert not torch.allclose(out[0], out[1], atol=1e-3)


def test_embed_adds_the_table_to_the_token_vectors():
    pe = Sinusoidal2dPE(dims(8))
    pos = Positions.from_tensor(torch.tensor([[[0, 0], [3, 4]]]))
    x = torch.randn(2, 2, 8)
    assert torch.allclose(
        pe.embed(x, torch.zeros(2, 2, dtype=torch.long), pos), x + pe.position_vectors(pos)
    )


@pytest.mark.parametrize("d_model", [6, 10])
def test_a_model_width_that_is_not_a_multiple_of_four_is_refused(d_model):
    with pytest.raises(ConfigError, match=rf"multiple of 4, got {d_model}"):
        Sinusoidal2dPE(dims(d_model))


def test_an_unknown_layout_names_the_valid_ones():
    with pytest.raises(ConfigError, match="pe.layout='spiral' is not a choice; .*interleaved"):
        Sinusoidal2dPE(dims(8), layout="spiral")


def test_one_dimensional_positions_are_refused_clearly():
    with pytest.raises(ConfigError, match=r"pe=sinusoidal_2d reads 2-D positions .* \[1, 5\]"):
        Sinusoidal2dPE(dims(8)).position_vectors(Positions.contiguous(5))
