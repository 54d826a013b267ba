"""CABLE (Veisi et al. 2025): the bias against the paper's equation by hand, its reduction to
ALiBi, the released code's variant being FoX, and the options."""

import math

import pytest
import torch
import torch.nn.functional as F

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims
from pelab.pe.bias import AlibiPE
from pelab.pe.cable import CablePE
from pelab.pe.fox import ForgettingPE
from pelab.positions import Positions
from tests.pe.nets import sharp_net

DIMS = ModelDims(d_model=8, n_heads=2, n_layers=2, causal=True, max_len=16)
CAUSAL = torch.ones(6, 6).tril().bool()


def drawn(weight: str = "token") -> CablePE:
    """A CABLE with every map drawn large, so steps are both zero (relu) and not, and weights
    vary from token to token."""
    torch.manual_seed(0)
    pe = CablePE(DIMS, weight=weight)
    for p in pe.parameters():
        torch.nn.init.normal_(p, std=0.7)
    return pe


def bias_of(pe: CablePE, x: torch.Tensor, layer: int) -> torch.Tensor:
    return pe.input_bias(x, None, None, Positions.contiguous(x.shape[1]), layer)


@pytest.mark.parametrize("weight", ["token", "none"])
def test_the_bias_is_minus_the_weighted_steps_after_the_key_up_to_the_query(weight):
    pe, layer = drawn(weight), 1
    x = torch.randn(2, 6, 8)
    bias = bias_of(pe, x, layer)  # [b, h, i, j]
    a, c = pe.steps[layer].weight.detach(), pe.steps[layer].bias.detach()  # [h, d], [h]
    steps = 0
    for b in range(2):
        for h in range(2):
            r = [max(0.0, float(x[b, t] @ a[h] + c[h])) for t in range(6)]
            steps += sum(step == 0 for step in r)
            for i in range(6):
                w = 1.0
                if weight == "token":
                    u, e = pe.scales[layer].weight[h].detach(), pe.scales[layer].bias[h].detach()
                    w = math.log1p(math.exp(float(x[b, i] @ u + e)))  # softplus
                for j in range(i + 1):
                    expected = -w * sum(r[j + 1 : i + 1])  # t = j+1 .. i
                    assert math.isclose(bias[b, h, i, j].item(), expected, abs_tol=1e-5)
    assert 0 < steps < 24  # the drawn maps give both zero and positive steps


def test_the_bias_is_nonpositive_and_falls_with_every_token_between_key_and_query():
    bias = bias_of(drawn(), torch.randn(3, 6, 8), 0)
    assert (bias[..., CAUSAL] <= 0).all() and (bias.diagonal(dim1=-2, dim2=-1) == 0).all()
    farther, nearer = bias[..., 1:, :-1], bias[..., 1:, 1:]  # keys j and j + 1 of query i
    assert (farther <= nearer)[..., CAUSAL[1:, 1:]].all()


@pytest.mark.parametrize("weight", ["token", "none"])
def test_constant_steps_are_alibi_with_slope_step_times_weight(weight):
    pe, slopes = CablePE(DIMS, weight=weight), torch.tensor([0.5, 0.125])
    with torch.no_grad():
        pe.steps[1].weight.zero_()
        pe.steps[1].bias.copy_(slopes)  # r_t = m_h for every token
        if weight == "token":
            pe.scales[1].weight.zero_()
            pe.scales[1].bias.fill_(math.log(math.e - 1))  # w = softplus(.) = 1
    bias = bias_of(pe, torch.randn(1, 6, 8), 1)[0]  # [h, i, j]
    alibi = AlibiPE(DIMS)
    alibi.slopes = slopes
    expected = alibi.logit_bias(Positions.contiguous(6), 1)[0]  # -m_h (i - j)
    torch.testing.assert_close(bias[:, CAUSAL], expected[:, CAUSAL])


def test_the_weight_scales_the_row_of_its_query_token():
    pe, x = drawn(), torch.randn(1, 6, 8)
    with torch.no_grad():
        pe.steps[0].weight.zero_()  # constant steps: only the weights read x
        pe.steps[0].bias.fill_(0.3)
    changed = x.clone()
    changed[0, 3] += 1.0  # changes w_3 alone
    diff = (bias_of(pe, x, 0) - bias_of(pe, changed, 0)).abs()[0].amax(0)  # [i, j]
    assert (diff[3, :3] > 1e-3).all()
    diff[3] = 0
    assert (diff[CAUSAL] < 1e-6).all()


def test_the_released_codes_cable_is_fox_with_its_gate_weights_negated():
    """axiomlab/Cable src/Cable.py: ``b = cumsum(-softplus(h_attn(x)), dim=1)``, ``Bias = b_i -
    b_j``, no weight. With FoX's gate weights ``-W`` and ``-c`` the logits get the same bias."""
    torch.manual_seed(1)
    fox = ForgettingPE(DIMS)
    x = torch.randn(2, 6, 8)
    for layer in range(DIMS.n_layers):
        W, c = torch.randn(2, 8), torch.randn(2)  # the code's h_attn: Linear(n_embd, n_head)
        b = torch.cumsum(-F.softplus(x @ W.T + c), dim=1).permute(0, 2, 1)  # [b, h, n]
        code = b.unsqueeze(3) - b.unsqueeze(2)  # [b, h, i, j]
        with torch.no_grad():
            fox.parts["gate"].gates[layer].weight.copy_(-W)
            fox.parts["gate"].gates[layer].bias.copy_(-c)
        got = fox.input_bias(x, None, None, Positions.contiguous(6), layer)
        torch.testing.assert_close(got[..., CAUSAL], code[..., CAUSAL])


def test_cable_is_not_fox_a_step_below_zero_adds_nothing():
    pe = CablePE(DIMS, weight="none")
    with torch.no_grad():
        pe.steps[0].weight.zero_()
        pe.steps[0].bias.fill_(-1.0)  # relu(-1) = 0: no decay; FoX's -softplus(-1) is not 0
    assert (bias_of(pe, torch.randn(1, 6, 8), 0) == 0).all()


def test_the_maps_are_per_layer_and_start_as_the_released_code():
    torch.manual_seed(0)
    pe = CablePE(DIMS, weight="token")
    x = torch.randn(1, 5, 8)
    assert not torch.allclose(bias_of(pe, x, 0), bias_of(pe, x, 1))
    for layer in (*pe.steps, *pe.scales):
        assert (layer.bias == 0).all() and 0.01 < layer.weight.std() < 0.04
    assert CablePE(DIMS, weight="none").scales is None


def test_cable_runs_on_the_fused_kernel_and_float32_under_autocast():
    net = sharp_net(CablePE)
    assert all(block.attn.attend == block.attn.attend_fused for block in net.blocks)
    pe, x = drawn(), torch.randn(1, 32, 8)
    exact = bias_of(pe, x, 0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bias = bias_of(pe, x, 0)
    assert bias.dtype == torch.float32 and torch.equal(bias, exact)


def test_bad_options_and_encoders_are_refused_with_the_choices():
    with pytest.raises(ConfigError, match=r"pe.weight='query'.*token.*none"):
        CablePE(DIMS, weight="query")
    with pytest.raises(ConfigError, match="causal models only"):
        CablePE(ModelDims(d_model=8, n_heads=2, n_layers=2, causal=False, max_len=16))
