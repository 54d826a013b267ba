import math
from functools import partial

import pytest
import torch

from pelab.errors import ConfigError
from pelab.models.dims import NetDims
from pelab.models.transformer import Transformer
from pelab.pe.base import ModelDims
from pelab.pe.complex_order import ComplexOrderPE
from pelab.positions import Positions


def dims(d_model: int = 4, vocab: int = 3) -> ModelDims:
    return ModelDims(d_model, 1, 1, True, 16, vocab_size=vocab)


def as_complex(out: torch.Tensor) -> torch.Tensor:
    """The real view ``[Re || Im]`` -> complex ``[..., D]``."""
    re, im = out.chunk(2, dim=-1)
    return torch.complex(re, im)


def random_pe(d_model: int = 8, vocab: int = 5) -> ComplexOrderPE:
    torch.manual_seed(0)
    pe = ComplexOrderPE(dims(d_model, vocab)).double()
    torch.nn.init.normal_(pe.freq.weight)  # token-specific frequencies, as after training
    return pe


def test_hand_computed_values_for_one_token():
    pe = ComplexOrderPE(dims())
    with torch.no_grad():
        pe.freq.weight[1] = torch.tensor([0.5, 2.0])
    x = torch.tensor([[[1.0, 2.0, 3.0, 4.0]]])  # c = (1 + 3i, 2 + 4i)
    out = pe.embed(x, torch.tensor([[1]]), Positions.from_tensor(torch.tensor([3])))
    a, b = 1.5, 6.0  # w p = 0.5 * 3, 2.0 * 3
    expected = torch.tensor(
        [
            1 * math.cos(a) - 3 * math.sin(a),
            2 * math.cos(b) - 4 * math.sin(b),
            1 * math.sin(a) + 3 * math.cos(a),
            2 * math.sin(b) + 4 * math.cos(b),
        ]
    )
    assert torch.allclose(out[0, 0], expected, atol=1e-6)


def test_frequencies_start_at_the_sinusoid_frequencies_for_every_token():
    # d_model 4, base 10000: base^(-0/4) = 1 and base^(-2/4) = 0.01
    pe = ComplexOrderPE(dims(vocab=3))
    assert torch.allclose(pe.freq.weight, torch.tensor([[1.0, 0.01]] * 3))
    pe = ComplexOrderPE(dims(vocab=3), base=100.0)
    assert torch.allclose(pe.freq.weight, torch.tensor([[1.0, 0.1]] * 3))


def test_output_is_the_papers_formula_r_exp_i_w_p_plus_theta():
    pe = random_pe()
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    tokens = torch.randint(0, 5, (2, 6))
    p = torch.tensor([0, 1, 2, 7, 30, 100])
    out = as_complex(pe.embed(x, tokens, Positions.from_tensor(p)))
    c = as_complex(x)  # r e^{i theta}
    r, theta, w = c.abs(), c.angle(), pe.freq(tokens)
    assert torch.allclose(out, torch.polar(r, w * p[:, None] + theta))


def test_position_zero_returns_the_token_embedding_unchanged():
    pe = random_pe()
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    out = pe.embed(x, torch.randint(0, 5, (2, 4)), Positions.from_tensor(torch.zeros(4)))
    assert torch.equal(out, x)


def test_modulus_is_constant_and_an_offset_is_a_fixed_token_dependent_rotation():
    pe = random_pe()
    x = torch.randn(1, 5, 8, dtype=torch.float64).expand(3, 5, 8)  # one sequence, 3 placements
    tokens = torch.tensor([[0, 1, 2, 3, 4]]).expand(3, 5)
    k = 4
    starts = torch.tensor([[0], [9], [50]]) + torch.arange(5)  # [3, 5] positions
    at_p = as_complex(pe.embed(x, tokens, Positions.from_tensor(starts)))
    at_p_k = as_complex(pe.embed(x, tokens, Positions.from_tensor(starts + k)))
    assert torch.allclose(at_p.abs(), as_complex(x).abs())  # |f(j, p)| = r_j at every p
    turn = torch.polar(torch.ones(5, 4, dtype=torch.float64), pe.freq(tokens[0]) * k)
    assert torch.allclose(at_p_k, at_p * turn)  # f(j, p + k) = f(j, p) e^{i w_j k}, any p


def test_tokens_with_different_frequencies_rotate_differently():
    pe = ComplexOrderPE(dims(vocab=3))
    x = torch.tensor([[[1.0, 0.0, 0.0, 0.0]]]).expand(1, 3, 4)  # the same c for all tokens
    tokens = torch.tensor([[0, 1, 2]])
    pos = Positions.from_tensor(torch.tensor([5, 5, 5]))
    at_init = pe.embed(x, tokens, pos)
    assert torch.allclose(at_init[0, 0], at_init[0, 1])  # identical w: token-independent
    with torch.no_grad():
        pe.freq.weight[2, 0] = 0.3
    out = pe.embed(x, tokens, pos)
    assert torch.allclose(out[0, 0], out[0, 1])
    assert torch.allclose(as_complex(out[0, 0])[0].angle(), torch.tensor(5.0 - 2 * math.pi))
    assert torch.allclose(as_complex(out[0, 2])[0].angle(), torch.tensor(1.5))


def test_one_frequency_per_token_and_complex_dimension():
    pe = ComplexOrderPE(dims(d_model=16, vocab=12))
    assert [(n, tuple(p.shape)) for n, p in pe.named_parameters()] == [("freq.weight", (12, 8))]
    assert sum(p.numel() for p in pe.parameters()) == 12 * 8


def test_the_model_sees_a_shift_of_all_positions():
    torch.manual_seed(0)
    dims = NetDims(vocab_size=12, max_len=64, d_model=16, n_heads=2, n_layers=2)
    net = Transformer(dims, partial(ComplexOrderPE), causal=True)
    tokens = torch.randint(0, 12, (2, 9))
    base = torch.arange(9)
    assert not torch.allclose(net(tokens, base), net(tokens, base + 13), atol=1e-3)


def test_odd_model_dimension_is_refused_with_a_clear_message():
    with pytest.raises(ConfigError, match=r"even model.net.d_model.*got 5.*d_model=6"):
        ComplexOrderPE(dims(d_model=5))


def test_unknown_vocabulary_size_is_refused():
    with pytest.raises(ConfigError, match=r"vocab_size >= 1, got 0"):
        ComplexOrderPE(dims(vocab=0))


def test_non_positive_base_is_refused():
    with pytest.raises(ConfigError, match=r"pe.base > 0, got 0"):
        ComplexOrderPE(dims(), base=0.0)
