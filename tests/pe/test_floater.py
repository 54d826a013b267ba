import copy
from functools import partial

import pytest
import torch

import pelab.pe.floater as floater
from pelab.errors import ConfigError
from pelab.models.transformer import Transformer
from pelab.pe.base import ModelDims
from pelab.pe.floater import FloaterPE
from pelab.positions import Positions
from tests.pe.nets import sharp_net

DIMS = ModelDims(d_model=8, n_heads=2, n_layers=3, causal=True, max_len=16)


def make_pe(**kwargs) -> FloaterPE:
    torch.manual_seed(0)
    pe = FloaterPE(DIMS, **kwargs)
    for p in pe.parameters():  # larger than the init, so the dynamics visibly move p
        torch.nn.init.normal_(p, std=0.5)
    return pe


def make_net(causal: bool = True, n_layers: int = 2, **kwargs) -> Transformer:
    return sharp_net(
        partial(FloaterPE, **kwargs), causal, max_len=16, d_model=8, n_layers=n_layers
    )


def table(pe: FloaterPE, positions) -> torch.Tensor:
    """``[n, l, d]`` encodings at ``positions``."""
    return pe.table(Positions.from_tensor(torch.as_tensor(positions)))[0]


def euler_reference(pe: FloaterPE, n: int, steps_per_position: int = 1000) -> torch.Tensor:
    """A tiny explicit Euler solve at a very small step, as an independent reference."""
    dt = pe.delta / steps_per_position
    p, out = pe.initial.detach().double(), []
    dynamics = copy.deepcopy(pe.dynamics).double()
    for i in range(n):
        out.append(p)
        for s in range(steps_per_position):
            p = p + dt * dynamics(torch.tensor(i * pe.delta + s * dt, dtype=p.dtype), p)
    return torch.stack(out).float()  # [n, l, d]


def test_the_encoding_at_position_zero_is_each_blocks_initial_value():
    pe = make_pe()
    assert torch.equal(table(pe, [0, 1, 2])[0], pe.initial)


@torch.no_grad()
def test_the_table_solves_the_ode_like_a_fine_euler_reference():
    pe = make_pe(delta=0.1)
    assert torch.allclose(table(pe, torch.arange(12)), euler_reference(pe, 12), atol=1e-3)


@torch.no_grad()
def test_consecutive_positions_follow_the_dynamics_to_first_order():
    # p(t + Δ) = p(t) + Δ h(t, p(t)) + O(Δ²): the error shrinks ~100x when Δ shrinks 10x
    errors = []
    for delta in (0.1, 0.01):
        pe = make_pe(delta=delta)
        p = table(pe, [3, 4])  # t = 3Δ and 4Δ
        step = delta * pe.dynamics(torch.tensor(3 * delta), p[0])
        errors.append((p[1] - p[0] - step).abs().max())
    assert errors[0] > 1e-5
    assert errors[1] < errors[0] / 30


@torch.no_grad()
def test_shifted_and_sparse_positions_get_the_encodings_at_their_own_times():
    pe = make_pe()
    full = table(pe, torch.arange(40))
    assert torch.allclose(table(pe, torch.arange(5) + 30), full[30:35], atol=1e-6)
    assert torch.allclose(table(pe, [2, 7, 19, 33]), full[[2, 7, 19, 33]], atol=1e-6)
    assert torch.allclose(table(pe, [7, 2, 7]), full[[7, 2, 7]], atol=1e-6)  # any order, repeats
    assert not torch.allclose(full[30:35], full[:5], atol=1e-3)  # absolute, not shift-invariant


@torch.no_grad()
def test_a_batch_of_different_positions_is_indexed_per_row():
    pe = make_pe()
    rows = torch.tensor([[0, 1, 2], [5, 9, 10]])
    batched = pe.table(Positions.from_tensor(rows))  # [b, n, l, d]
    assert batched.shape == (2, 3, DIMS.n_layers, DIMS.d_model)
    full = table(pe, torch.arange(11))
    assert torch.allclose(batched, full[rows], atol=1e-6)


@torch.no_grad()
def test_the_ode_defines_positions_far_beyond_max_len():
    pe = make_pe()
    far = table(pe, [0, DIMS.max_len, 10 * DIMS.max_len, 10 * DIMS.max_len + 1])
    assert torch.isfinite(far).all()
    assert not torch.allclose(far[2], far[3], atol=1e-4)  # neighbours stay distinguishable
    net = make_net()
    out = net(torch.randint(0, 12, (1, 6)), torch.tensor([0, 3, 50, 51, 120, 400]))
    assert torch.isfinite(out).all()


@torch.no_grad()
def test_every_block_gets_its_own_encoding_added_to_its_input():
    net = make_net(n_layers=3)
    pe, seen = net.pe, []
    original = pe.layer_input

    def record(x, pos, layer):
        out = original(x, pos, layer)
        seen.append((layer, out - x))
        return out

    pe.layer_input = record
    positions = torch.tensor([1, 4, 5, 9])
    net(torch.randint(0, 12, (2, 4)), positions)
    expected = table(pe, positions)  # [n, l, d]
    assert [layer for layer, _ in seen] == [0, 1, 2]
    for layer, added in seen:
        assert torch.allclose(added, expected[:, layer].expand(2, 4, 8), atol=1e-5)
    assert not torch.allclose(seen[0][1], seen[1][1], atol=1e-3)  # per-block initial values


def test_one_ode_solve_is_shared_by_all_blocks_of_a_forward(monkeypatch):
    net, calls = make_net(n_layers=3), []

    def counting(*args, **kwargs):
        calls.append(1)
        return torch_odeint(*args, **kwargs)

    torch_odeint = floater.odeint
    monkeypatch.setattr(floater, "odeint", counting)
    tokens = torch.randint(0, 12, (2, 7))
    net(tokens)
    net(tokens)
    assert len(calls) == 2


def test_dynamics_are_shared_and_initial_values_are_per_block():
    pe = FloaterPE(ModelDims(8, 2, 3, True, 16), hidden=5)
    shapes = {name: tuple(p.shape) for name, p in pe.named_parameters()}
    assert shapes == {
        "initial": (3, 8),
        "dynamics.inp.weight": (5, 9),  # [p; t] -> hidden
        "dynamics.inp.bias": (5,),
        "dynamics.out.weight": (8, 5),
        "dynamics.out.bias": (8,),
    }
    assert sum(p.numel() for p in pe.parameters()) == 3 * 8 + 5 * 9 + 5 + 8 * 5 + 8
    assert not pe.dynamics.inp.bias.any() and not pe.dynamics.out.bias.any()  # zero biases


def test_gradients_flow_through_the_solver_to_every_block_and_the_dynamics():
    net = make_net(n_layers=3).train()
    net(torch.randint(0, 12, (2, 8))).sum().backward()
    assert (net.pe.initial.grad.abs().sum(dim=-1) > 0).all()  # every block's p(0)
    for name, p in net.pe.dynamics.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_the_forward_is_deterministic():
    net = make_net()
    tokens, positions = torch.randint(0, 12, (2, 9)), torch.tensor([0, 2, 3, 5, 8, 9, 11, 12, 20])
    assert torch.equal(net(tokens, positions), net(tokens, positions))


@pytest.mark.parametrize("method", ["euler", "midpoint"])
def test_other_fixed_step_solvers_agree_at_a_small_step(method):
    with torch.no_grad():
        reference = table(make_pe(), torch.arange(10))
        other = table(make_pe(method=method, substeps=20), torch.arange(10))
    assert torch.allclose(other, reference, atol=1e-3)


def test_an_encoder_gets_positions_too():
    net = make_net(causal=False)
    tokens = torch.tensor([[3, 4, 5, 6]])
    perm = torch.tensor([3, 1, 0, 2])
    assert not torch.allclose(net(tokens)[:, perm], net(tokens[:, perm]), atol=1e-4)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"hidden": 0}, r"hidden >= 1, got hidden=0"),
        ({"delta": 0.0}, r"delta > 0, got delta=0.0"),
        ({"delta": -0.5}, r"delta > 0, got delta=-0.5"),
        ({"method": "dopri5"}, "pe.method='dopri5' is not a choice; .*: euler, midpoint, rk4"),
        ({"substeps": 0}, r"substeps >= 1, got substeps=0"),
    ],
)
def test_bad_settings_are_refused_with_clear_messages(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        FloaterPE(DIMS, **kwargs)


def test_negative_positions_are_refused():
    with pytest.raises(ConfigError, match=r"positions >= 0, got -2"):
        table(make_pe(), [-2, 0, 1])
