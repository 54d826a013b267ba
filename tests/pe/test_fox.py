"""FoX (Lin et al. 2025): the forget-gate bias, its defining properties, and its composition."""

import math

import pytest
import torch

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims
from pelab.pe.bias import AlibiPE
from pelab.pe.fox import ForgettingPE, forget_bias
from pelab.positions import Positions
from tests.pe.nets import sharp_net

DIMS = ModelDims(d_model=8, n_heads=2, n_layers=2, causal=True, max_len=16)


def test_the_bias_is_the_sum_of_the_log_gates_after_the_key_up_to_the_query():
    log_f = -torch.rand(2, 3, 6)  # [b, h, n]
    bias = forget_bias(log_f)
    for i in range(6):
        for j in range(i + 1):
            expected = log_f[..., j + 1 : i + 1].sum(-1)  # l = j+1 .. i
            torch.testing.assert_close(bias[..., i, j], expected)
    assert (bias.diagonal(dim1=-2, dim2=-1) == 0).all()


def test_constant_gates_are_alibi_with_slope_minus_log_f():
    pe = ForgettingPE(DIMS)
    gate = pe.parts["gate"].gates[1]
    with torch.no_grad():
        gate.weight.zero_()
        gate.bias.copy_(torch.tensor([0.0, 2.0]))  # f = sigmoid(0) = 1/2, sigmoid(2)
    x = torch.randn(1, 5, 8)
    bias = pe.input_bias(x, None, None, Positions.contiguous(5), layer=1)[0]  # [h, i, j]
    alibi = AlibiPE(ModelDims(8, 2, 2, True, 16))
    alibi.slopes = -torch.nn.functional.logsigmoid(torch.tensor([0.0, 2.0]))
    expected = alibi.logit_bias(Positions.contiguous(5), 1)[0]
    causal = torch.ones(5, 5).tril().bool()
    torch.testing.assert_close(bias[:, causal], expected[:, causal])
    assert math.isclose(bias[0, 4, 0].item(), 4 * math.log(0.5), rel_tol=1e-6)


def test_a_token_changes_only_the_bias_of_pairs_whose_span_holds_it():
    pe = ForgettingPE(DIMS)
    torch.nn.init.normal_(pe.parts["gate"].gates[0].weight)
    x = torch.randn(1, 7, 8)
    changed = x.clone()
    changed[0, 4] += 1.0
    pos = Positions.contiguous(7)
    diff = (
        (pe.input_bias(x, None, None, pos, 0) - pe.input_bias(changed, None, None, pos, 0))
        .abs()[0]
        .amax(0)
    )
    i, j = torch.meshgrid(torch.arange(7), torch.arange(7), indexing="ij")
    spans = (j < 4) & (4 <= i)  # the gate of token 4 is in sum_{l=j+1..i}
    others = ~spans & (j <= i)  # (keys after the query are the causal mask's)
    assert (diff[spans] > 1e-2).all() and (diff[others] < 1e-5).all()


def test_gates_are_per_layer():
    pe = ForgettingPE(DIMS)
    x, pos = torch.randn(1, 4, 8), Positions.contiguous(4)
    assert not torch.allclose(
        pe.input_bias(x, None, None, pos, 0), pe.input_bias(x, None, None, pos, 1)
    )


def test_fox_runs_on_the_fused_kernel_and_composes_with_a_base_encoding():
    net = sharp_net(ForgettingPE)
    assert all(block.attn.attend == block.attn.attend_fused for block in net.blocks)
    with_rope = ForgettingPE(DIMS, base="rope")
    assert set(with_rope.parts) == {"gate", "base"} and with_rope.position_dims == 1
    assert with_rope.shift == "relative" and not with_rope.supports_kv_cache
    tokens = torch.randint(0, 12, (2, 9))
    net = sharp_net(lambda dims: ForgettingPE(dims, base="rope"))
    base = torch.arange(9)
    assert torch.allclose(net(tokens, base), net(tokens, base + 13), atol=1e-4)
    assert not torch.allclose(net(tokens), sharp_net(ForgettingPE)(tokens), atol=1e-3)


@pytest.mark.parametrize(
    ("base", "why"), [("fox", "FoX itself"), ("dape", "DAPE reads"), ("Rope", "an unknown")]
)
def test_an_unfit_base_is_refused_with_the_reason_and_the_choices(base, why):
    with pytest.raises(ConfigError, match=rf"pe.base='{base}' cannot carry pe=fox \({why}.*alibi"):
        ForgettingPE(DIMS, base=base)
