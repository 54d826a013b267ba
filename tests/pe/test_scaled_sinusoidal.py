import math

import pytest
import torch

from pelab.errors import ConfigError
from pelab.pe.absolute import SinusoidalPE, sinusoid_table
from pelab.pe.base import ModelDims
from pelab.pe.scaled_sinusoidal import ScaledSinusoidalPE
from pelab.positions import Positions

DIMS = ModelDims(d_model=4, n_heads=1, n_layers=1, causal=True, max_len=16)


def encode(pe: ScaledSinusoidalPE, positions: list[int]) -> torch.Tensor:
    x = torch.zeros(1, len(positions), pe.dims.d_model)
    tokens = torch.zeros(1, len(positions), dtype=torch.long)
    return pe.embed(x, tokens, Positions.from_tensor(torch.tensor(positions)))[0]


def test_the_only_parameter_is_one_scalar_starting_at_d_model_to_the_minus_half():
    pe = ScaledSinusoidalPE(ModelDims(64, 4, 2, True, 16))
    assert [name for name, _ in pe.named_parameters()] == ["scale"]
    assert pe.scale.shape == () and pe.scale.item() == pytest.approx(1 / 8)


def test_init_scale_overrides_the_default():
    assert ScaledSinusoidalPE(DIMS, init_scale=1.0).scale.item() == 1.0


def test_encoding_is_the_scale_times_the_hand_computed_sinusoid():
    pe = ScaledSinusoidalPE(DIMS)  # scale 4^-0.5 = 0.5; frequencies 1 and 0.01
    expected = 0.5 * torch.tensor(
        [[0.0, 1.0, 0.0, 1.0], [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)]]
    )
    assert torch.allclose(encode(pe, [0, 1]), expected)
    with torch.no_grad():
        pe.scale.fill_(-3.0)
    assert torch.allclose(encode(pe, [0, 1]), -6 * expected)


def test_base_and_layout_reach_the_sinusoid():
    pe = ScaledSinusoidalPE(DIMS, base=100.0, layout="concat")  # frequencies 1 and 0.1
    expected = 0.5 * torch.tensor([math.sin(2), math.sin(0.2), math.cos(2), math.cos(0.2)])
    assert torch.allclose(encode(pe, [2])[0], expected)


def test_with_scale_one_it_is_the_plain_sinusoidal_encoding():
    scaled, plain = ScaledSinusoidalPE(DIMS, init_scale=1.0), SinusoidalPE(DIMS)
    x = torch.randn(2, 5, 4)
    tokens, pos = torch.zeros(2, 5, dtype=torch.long), Positions.contiguous(5, offset=3)
    assert torch.equal(scaled.embed(x, tokens, pos), plain.embed(x, tokens, pos))


def test_gradient_of_the_scale_is_the_sinusoid_summed_against_the_upstream_gradient():
    pe = ScaledSinusoidalPE(DIMS)
    upstream = torch.randn(3, 4)
    (encode(pe, [0, 4, 7]) * upstream).sum().backward()
    expected = (sinusoid_table(torch.tensor([0, 4, 7]), 4) * upstream).sum()
    assert pe.scale.grad is not None and torch.allclose(pe.scale.grad, expected)


def test_odd_model_dimension_is_refused_with_a_fix():
    with pytest.raises(
        ConfigError, match=r"pe=scaled_sinusoidal needs an even model.net.d_model, got 5.*=6"
    ):
        ScaledSinusoidalPE(ModelDims(5, 1, 1, True, 8))


def test_unknown_layout_names_the_valid_choices():
    with pytest.raises(ConfigError, match=r"'zigzag'.*interleaved.*concat"):
        ScaledSinusoidalPE(DIMS, layout="zigzag")
