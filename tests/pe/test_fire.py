import math
from functools import partial

import pytest
import torch

from pelab.errors import ConfigError
from pelab.models.attention import Attention
from pelab.models.transformer import Transformer
from pelab.pe.base import ModelDims
from pelab.pe.fire import FirePE
from pelab.positions import Positions
from tests.pe.nets import sharp_net


def dims(heads: int = 2, causal: bool = True, layers: int = 1) -> ModelDims:
    return ModelDims(d_model=8 * heads, n_heads=heads, n_layers=layers, causal=causal, max_len=64)


def linear_fire(threshold: float, c: float = 1.0, causal: bool = True) -> FirePE:
    """FIRE whose MLP is ``f(x) = (x, 0.5 - 2x)`` on ``x >= 0``: one ReLU unit passing x on."""
    pe = FirePE(dims(2, causal), mlp_width=1, c_init=c, threshold_init=threshold)
    with torch.no_grad():
        pe.mlp[0][0].weight.fill_(1.0)
        pe.mlp[0][0].bias.zero_()
        pe.mlp[0][2].weight.copy_(torch.tensor([[1.0], [-2.0]]))
        pe.mlp[0][2].bias.copy_(torch.tensor([0.0, 0.5]))
    return pe


def bias_at(pe: FirePE, positions: torch.Tensor, layer: int = 0) -> torch.Tensor:
    return pe.logit_bias(Positions.from_tensor(positions), layer)[0]  # [h, i, j]


def make_net(causal: bool, threshold: float) -> Transformer:
    return sharp_net(partial(FirePE, threshold_init=threshold), causal)


def test_bias_is_the_mlp_of_the_normalised_log_distance_hand_computed():
    # c = 1, L = 2: x_ij = log(1 + |i - j|) / log(1 + max(2, i, j))
    bias = bias_at(linear_fire(threshold=2.0), torch.arange(4))
    log2, log3, log4 = math.log(2), math.log(3), math.log(4)
    x = torch.tensor(
        [
            [0, log2 / log3, log3 / log3, log4 / log4],
            [log2 / log3, 0, log2 / log3, log3 / log4],
            [log3 / log3, log2 / log3, 0, log2 / log4],
            [log4 / log4, log3 / log4, log2 / log4, 0],
        ]
    )
    assert torch.allclose(bias[0], x, atol=1e-5)
    assert torch.allclose(bias[1], 0.5 - 2 * x, atol=1e-5)


def reference_input(i: int, j: int, c: float, threshold: float) -> float:
    """The paper's MLP input for a visible pair (j <= i), written with scalar math."""
    return math.log(c * (i - j) + 1) / math.log(c * max(threshold, i) + 1)


@pytest.mark.parametrize("causal", [True, False])
def test_every_pair_a_decoder_sees_follows_the_papers_formula(causal):
    pe = linear_fire(threshold=5.0, c=0.3, causal=causal)
    bias = bias_at(pe, torch.arange(12))[0]  # head 0 is the MLP input itself
    for i in range(12):
        for j in range(i + 1):
            assert bias[i, j].item() == pytest.approx(reference_input(i, j, 0.3, 5.0), abs=1e-5)


def test_encoder_bias_is_symmetric_and_its_inputs_stay_in_the_unit_interval():
    pe = linear_fire(threshold=4.0, causal=False)
    x = bias_at(pe, torch.arange(40))[0]
    assert torch.equal(x, x.T)
    assert x.min() >= 0 and x.max() <= 1


def test_progressive_interpolation_maps_the_farthest_key_to_one_beyond_the_threshold():
    pe = linear_fire(threshold=8.0)
    x = bias_at(pe, torch.arange(300))[0]
    assert torch.allclose(x[8:, 0], torch.ones(292), atol=1e-5)  # i >= L: psi(i) / psi(i)
    assert (x[:8, 0] < 1).all()  # i < L: distances are not stretched to the full range
    assert x.min() >= 0 and x.max() <= 1 + 1e-6  # inputs never leave the trained range


def test_shift_leaves_the_bias_unchanged_only_while_positions_stay_below_the_threshold():
    pe = linear_fire(threshold=100.0)
    base = torch.arange(10)
    assert torch.allclose(bias_at(pe, base), bias_at(pe, base + 50), atol=1e-6)
    assert not torch.allclose(bias_at(pe, base), bias_at(pe, base + 500), atol=1e-3)


@pytest.mark.parametrize("causal", [True, False])
def test_model_sees_a_shift_past_the_threshold_but_not_below_it(causal):
    tokens = torch.randint(0, 12, (2, 9))
    base = torch.arange(9)
    net = make_net(causal, threshold=512.0)  # the paper's L: all positions here are below it
    assert torch.allclose(net(tokens, base), net(tokens, base + 13), atol=1e-4)
    net = make_net(causal, threshold=2.0)  # query positions normalise: not shift-invariant
    assert not torch.allclose(net(tokens, base), net(tokens, base + 13), atol=1e-3)


def test_parameters_are_per_layer_one_mlp_for_all_heads_plus_c_and_the_threshold_scale():
    pe = FirePE(dims(heads=4, layers=3))
    shapes = {name: tuple(p.shape) for name, p in pe.named_parameters()}
    per_layer = {
        "0.weight": (32, 1),
        "0.bias": (32,),
        "2.weight": (4, 32),
        "2.bias": (4,),
    }
    assert shapes == {
        **{
            f"mlp.{layer}.{name}": shape for layer in range(3) for name, shape in per_layer.items()
        },
        "c": (3,),
        "threshold_scale": (3,),
    }
    assert torch.allclose(pe.c, torch.full((3,), 0.1))
    assert torch.equal(pe.threshold, torch.full((3,), 512.0))
    assert sum(p.numel() for p in pe.parameters()) == 3 * ((32 + 1) * 4 + 2 * 32 + 2)


def test_each_layer_has_its_own_bias_from_its_own_mlp_c_and_threshold():
    pe = FirePE(dims(layers=2), threshold_init=4.0)
    positions = Positions.contiguous(12)  # one forward: both layers read the same positions
    first, second = pe.logit_bias(positions, 0), pe.logit_bias(positions, 1)
    assert not torch.allclose(first, second, atol=1e-3)  # the memo is per layer
    assert pe.logit_bias(positions, 0) is first  # and computed once per forward
    with torch.no_grad():  # layer 1 given layer 0's function: the same bias
        pe.mlp[1].load_state_dict(pe.mlp[0].state_dict())
    assert torch.equal(bias_at(pe, torch.arange(12), 1), first[0])
    with torch.no_grad():  # each layer's c and threshold act on that layer alone
        pe.c[1] = 0.7
        pe.threshold_scale[1] = 0.5
    assert torch.equal(bias_at(pe, torch.arange(12), 0), first[0])
    x = bias_at(pe, torch.arange(12), 1)
    assert not torch.allclose(x, first[0], atol=1e-3)
    with torch.no_grad():
        pe.c[0], pe.threshold_scale[0] = 0.7, 0.5
    assert torch.equal(bias_at(pe, torch.arange(12), 0), x)


@pytest.mark.parametrize("causal", [True, False])
def test_stays_on_the_fused_kernel_and_each_block_reads_its_own_layer(causal):
    net = make_net(causal, threshold=8.0)
    assert not FirePE.needs_eager_attention()
    assert all(block.attn.attend == block.attn.attend_fused for block in net.blocks)
    tokens = torch.randint(0, 12, (2, 12))
    eager = sharp_net(partial(FirePE, threshold_init=8.0), causal, impl="eager")
    assert torch.allclose(net(tokens), eager(tokens), atol=1e-5)
    # block 1 reads layer 1's bias (tests/models/test_attention_maps.py checks each block's
    # probabilities against its own layer's bias): changing layer 1's MLP alone changes the output
    before = net(tokens)
    with torch.no_grad():
        net.pe.mlp[1][2].weight.mul_(-2.0)
    assert not torch.allclose(net(tokens), before, atol=1e-3)
    attention = Attention(16, 2, causal, net.pe, layer=1)
    assert attention.attend == attention.attend_fused


def test_c_and_threshold_stay_positive_after_a_large_step():
    pe = FirePE(dims(), c_init=0.1, threshold_init=16.0)
    opt = torch.optim.SGD([pe.c, pe.threshold_scale], lr=1.0)
    pe.c.grad, pe.threshold_scale.grad = torch.full((1,), 1000.0), torch.full((1,), 1000.0)
    opt.step()
    assert pe.c < 0 and pe.threshold_scale < 0  # the raw parameters went negative
    assert pe.threshold > 0
    positions = torch.arange(20)
    bias = bias_at(pe, positions)
    assert torch.isfinite(bias).all()
    with torch.no_grad():  # the bias sees only |c| and |threshold_scale|
        pe.c.neg_()
        pe.threshold_scale.neg_()
    assert torch.equal(bias, bias_at(pe, positions))


def test_zero_c_gives_a_finite_constant_bias():
    pe = FirePE(dims(), c_init=0.1)
    with torch.no_grad():
        pe.c.zero_()
    bias = bias_at(pe, torch.arange(6))
    assert torch.isfinite(bias).all()
    assert torch.allclose(bias, bias[:, :1, :1].expand_as(bias))  # f(0) everywhere


@pytest.mark.parametrize("option", ["mlp_width", "c_init", "threshold_init"])
def test_non_positive_settings_are_refused_with_their_name(option):
    with pytest.raises(ConfigError, match=f"pe.{option} > 0, got 0"):
        FirePE(dims(), **{option: 0})
