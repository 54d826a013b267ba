import math
from functools import partial

import pytest
import torch

from pelab.errors import ConfigError
from pelab.models.stacked import stack_members
from pelab.models.transformer import Transformer
from pelab.pe.base import ModelDims
from pelab.pe.kerple import KerplePE
from pelab.positions import Positions
from tests.pe.nets import sharp_net


def dims(heads: int = 2, causal: bool = True) -> ModelDims:
    return ModelDims(d_model=8 * heads, n_heads=heads, n_layers=1, causal=causal, max_len=64)


def kerple(kernel: str, r1: list[float], r2: list[float], causal: bool = True) -> KerplePE:
    pe = KerplePE(dims(len(r1), causal), kernel=kernel)
    with torch.no_grad():
        pe.r1.copy_(torch.tensor(r1))
        pe.r2.copy_(torch.tensor(r2))
    return pe


def make_net(kernel: str, causal: bool) -> Transformer:
    return sharp_net(partial(KerplePE, kernel=kernel), causal)


DISTANCE = torch.tensor([[0.0, 1, 2], [1, 0, 1], [2, 1, 0]])


def test_log_kernel_is_minus_r1_log_of_one_plus_r2_distance():
    pe = kerple("log", r1=[1.0, 0.5], r2=[1.0, 2.0])
    bias = pe.logit_bias(Positions.contiguous(3), 0)[0]  # [h, i, j]
    log2, log3, log5 = math.log(2), math.log(3), math.log(5)
    head0 = torch.tensor([[0, -log2, -log3], [-log2, 0, -log2], [-log3, -log2, 0]])
    head1 = 0.5 * torch.tensor([[0, -log3, -log5], [-log3, 0, -log3], [-log5, -log3, 0]])
    assert torch.allclose(bias[0], head0, atol=1e-6)
    assert torch.allclose(bias[1], head1, atol=1e-6)


def test_power_kernel_is_minus_r1_distance_to_the_r2():
    pe = kerple("power", r1=[1.0, 0.5, 2.0], r2=[1.0, 2.0, 0.5])
    bias = pe.logit_bias(Positions.contiguous(3), 0)[0]
    assert torch.allclose(bias[0], -DISTANCE)  # r2 = 1: ALiBi with slope r1
    assert torch.allclose(bias[1], -0.5 * DISTANCE**2)
    sqrt2 = math.sqrt(2)
    expected = -2.0 * torch.tensor([[0, 1, sqrt2], [1, 0, 1], [sqrt2, 1, 0]])
    assert torch.allclose(bias[2], expected)


@pytest.mark.parametrize("kernel", ["log", "power"])
def test_encoder_bias_is_symmetric_in_query_and_key(kernel):
    pe = KerplePE(dims(causal=False), kernel=kernel)
    bias = pe.logit_bias(Positions.contiguous(6), 0)[0]
    assert torch.equal(bias, bias.transpose(-1, -2))
    assert (bias[:, 0, 1:] < 0).all()  # every other position is penalised


@pytest.mark.parametrize("kernel", ["log", "power"])
def test_bias_is_invariant_to_shifting_all_positions(kernel):
    pe = KerplePE(dims(heads=4), kernel=kernel)
    a = pe.logit_bias(Positions.contiguous(7), 0)
    b = pe.logit_bias(Positions.contiguous(7, offset=1000), 0)
    assert torch.equal(a, b)


@pytest.mark.parametrize("kernel", ["log", "power"])
@pytest.mark.parametrize("causal", [True, False])
def test_model_outputs_are_invariant_to_shifting_all_positions(kernel, causal):
    net = make_net(kernel, causal)
    tokens = torch.randint(0, 12, (2, 9))
    base = torch.arange(9)
    assert torch.allclose(net(tokens, base), net(tokens, base + 13), atol=1e-4)


@pytest.mark.parametrize(
    ("kernel", "r1_high", "r2_high"), [("log", 2.0, 1.0), ("power", 1.0, 2.0)]
)
def test_one_r1_and_r2_per_head_initialised_uniformly_as_the_authors(kernel, r1_high, r2_high):
    torch.manual_seed(0)
    pe = KerplePE(dims(heads=64), kernel=kernel)
    assert [n for n, _ in pe.named_parameters()] == ["r1", "r2"]
    assert pe.r1.shape == pe.r2.shape == (64,)
    assert 0 <= pe.r1.min() and pe.r1.max() < r1_high and pe.r1.max() > 0.8 * r1_high
    assert 0 <= pe.r2.min() and pe.r2.max() < r2_high and pe.r2.max() > 0.8 * r2_high


@pytest.mark.parametrize(("kernel", "r2_max"), [("log", math.inf), ("power", 2.0)])
def test_parameters_stay_in_range_after_a_large_step_and_can_come_back(kernel, r2_max):
    pe = KerplePE(dims(heads=2), kernel=kernel)
    opt = torch.optim.SGD(pe.parameters(), lr=1.0)
    pe.r1.grad = torch.full((2,), 1000.0)  # drives r1 to about -1000
    pe.r2.grad = torch.tensor([1000.0, -1000.0])  # r2 to about -1000 and +1000
    opt.step()
    assert (pe.r1 < 0).all()  # the optimizer itself knows no constraint
    stepped_r2 = pe.r2.detach().clone()

    pe.constrain()  # what a network does before each forward (run_blocks)
    bias = pe.logit_bias(Positions.contiguous(5), 0)
    assert torch.equal(pe.r1, torch.full((2,), KerplePE.eps))
    assert pe.r2[0] == KerplePE.eps
    assert pe.r2[1] == min(stepped_r2[1].item(), r2_max)
    assert torch.isfinite(bias).all() and (bias <= 0).all()

    # a parameter on the boundary still gets its gradient, so it can move back inside
    pe.zero_grad()
    bias.sum().backward()  # a larger r1 makes the bias more negative: negative gradient
    assert (pe.r1.grad < 0).all()
    opt.step()
    assert (pe.r1 > KerplePE.eps).all()


@pytest.mark.parametrize("members", [1, 2])
def test_a_networks_forward_constrains_every_members_parameters_first(members):
    """The network constrains before any hook reads the parameters, a stack's every member
    (their ``r1, r2`` stacked ``[K, h]``)."""
    net = stack_members([make_net("power", causal=True) for _ in range(members)])
    held = net.pe.state(selected=False) if members > 1 else dict(net.pe.named_parameters())
    with torch.no_grad():
        held["r1"].fill_(-5.0)
        held["r2"].fill_(9.0)
    net(torch.randint(0, 12, (2 * members, 5)))
    assert torch.equal(held["r1"], torch.full_like(held["r1"], KerplePE.eps))
    assert torch.equal(held["r2"], torch.full_like(held["r2"], 2.0))  # the power kernel's r2_max


def test_power_kernel_gradients_are_finite_at_zero_distance():
    net = make_net("power", causal=True).train()
    net(torch.randint(0, 12, (2, 8))).sum().backward()
    for p in (net.pe.r1, net.pe.r2):
        assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0


def test_unknown_kernel_names_the_valid_choices():
    with pytest.raises(
        ConfigError, match="pe.kernel='gauss' is not a choice; valid choices: log, power"
    ):
        KerplePE(dims(), kernel="gauss")
