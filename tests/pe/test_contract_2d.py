"""The contract of ``test_contract.py`` for encodings of 2-D positions, checked through the whole
model on the (row, col) coordinates of the grid task."""

from functools import partial

import pytest
import torch

from pelab.errors import ConfigError
from pelab.models.dims import NetDims
from pelab.models.transformer import Transformer
from pelab.pe import PE_REGISTRY
from pelab.tasks.grid import GridTask

TWO_D = sorted(name for name, cls in PE_REGISTRY.items() if cls.position_dims == 2)
# use only offsets (row_i - row_j, col_i - col_j), or see a shift in either axis
RELATIVE_2D = [name for name in TWO_D if PE_REGISTRY[name].shift == "relative"]
ABSOLUTE_2D = [name for name in TWO_D if PE_REGISTRY[name].shift == "absolute"]


def grid_net(name: str, causal: bool = True, impl: str = "auto") -> Transformer:
    """A seeded 2-head model over 12 tokens in eval mode, weights drawn large (std 0.5) so that
    attention is sharp and positions visibly matter (as ``tests.pe.nets.sharp_net``)."""
    torch.manual_seed(0)
    dims = NetDims(
        vocab_size=12, max_len=512, d_model=16, n_heads=2, attn_impl=impl, position_dims=2
    )
    net = Transformer(dims, partial(PE_REGISTRY[name]), causal)
    for p in net.parameters():
        torch.nn.init.normal_(p, std=0.5 if p.dim() > 1 else 1.0)
    return net.eval()


def grid_coordinates(side: int) -> torch.Tensor:
    """``[1, 2 side² + 2, 2]``: the grid task's (row, col) of ``BOS prompt SEP answer``."""
    return GridTask().coordinates(side * side, side * side)[None]


def with_model_kinds(names: list[str]) -> list[tuple[str, bool]]:
    return [(name, causal) for name in names for causal in (True, False)]


def test_every_2d_encoding_is_relative_or_absolute():
    assert sorted(RELATIVE_2D + ABSOLUTE_2D) == TWO_D


@pytest.mark.parametrize("name", TWO_D)
def test_decoder_output_at_t_never_depends_on_later_tokens(name):
    net, pos = grid_net(name), grid_coordinates(2)  # 10 tokens
    tokens = torch.randint(0, 12, (2, 10))
    changed = tokens.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % 12
    a, b = net(tokens, pos), net(changed, pos)
    assert torch.allclose(a[:, :6], b[:, :6], atol=1e-5)
    assert not torch.allclose(a[:, 6:], b[:, 6:], atol=1e-3)


@pytest.mark.parametrize(("name", "causal"), with_model_kinds(RELATIVE_2D))
@pytest.mark.parametrize("shift", [(3, 0), (0, 5), (7, 11)])
def test_relative_encodings_are_invariant_to_shifting_all_positions_in_each_axis(
    name, causal, shift
):
    net, pos = grid_net(name, causal), grid_coordinates(3)
    tokens = torch.randint(0, 12, (2, pos.shape[1]))
    assert torch.allclose(net(tokens, pos), net(tokens, pos + torch.tensor(shift)), atol=1e-4)


@pytest.mark.parametrize(("name", "causal"), with_model_kinds(ABSOLUTE_2D))
@pytest.mark.parametrize("shift", [(3, 0), (0, 5)])
def test_absolute_encodings_see_a_shift_in_either_axis(name, causal, shift):
    net, pos = grid_net(name, causal), grid_coordinates(3)
    tokens = torch.randint(0, 12, (2, pos.shape[1]))
    assert not torch.allclose(net(tokens, pos), net(tokens, pos + torch.tensor(shift)), atol=1e-3)


@pytest.mark.parametrize("name", TWO_D)
def test_an_encoder_with_them_is_not_permutation_equivariant(name):
    net, pos = grid_net(name, causal=False), grid_coordinates(2)
    tokens = torch.tensor([[0, 3, 4, 5, 6, 1, 7, 8, 9, 10]])
    perm = torch.tensor([0, 4, 2, 1, 3, 5, 9, 6, 8, 7])
    assert not torch.allclose(net(tokens, pos)[:, perm], net(tokens[:, perm], pos), atol=1e-4)


@pytest.mark.parametrize("name", TWO_D)
def test_an_encoder_with_them_tells_rows_from_columns(name):
    net, pos = grid_net(name, causal=False), grid_coordinates(3)
    tokens = torch.randint(0, 12, (2, pos.shape[1]))
    assert not torch.allclose(net(tokens, pos), net(tokens, pos.flip(-1)), atol=1e-3)


@pytest.mark.parametrize(("name", "causal"), with_model_kinds(TWO_D))
def test_fused_attention_computes_the_same_function_as_eager(name, causal):
    pos = grid_coordinates(3)
    tokens = torch.randint(0, 12, (3, pos.shape[1]))
    eager = grid_net(name, causal, impl="eager")(tokens, pos)
    fused = grid_net(name, causal, impl="fused")(tokens, pos)
    assert torch.allclose(eager, fused, atol=1e-5)


@pytest.mark.parametrize("name", TWO_D)
def test_gradients_reach_every_parameter_of_the_encoding(name):
    net, pos = grid_net(name).train(), grid_coordinates(2)
    net(torch.randint(0, 12, (2, pos.shape[1])), pos).sum().backward()
    for pname, p in net.pe.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname


@pytest.mark.parametrize(("name", "causal"), with_model_kinds(TWO_D))
def test_runs_on_grids_larger_than_any_trained_and_far_from_the_origin(name, causal):
    net, pos = grid_net(name, causal), grid_coordinates(12)  # 290 tokens, rows and cols to 25
    tokens = torch.randint(0, 12, (1, pos.shape[1]))
    for offset in (0, 1000):
        out = net(tokens, pos + offset)
        assert out.shape == (1, 290, 12) and torch.isfinite(out).all()


@pytest.mark.parametrize("name", TWO_D)
def test_without_grid_coordinates_the_model_stops_with_a_clear_error(name):
    with pytest.raises(ConfigError, match=rf"pe={name} reads 2-D positions .* \[1, 6\]"):
        grid_net(name)(torch.randint(0, 12, (1, 6)))  # default positions: 1-D, 0..5
