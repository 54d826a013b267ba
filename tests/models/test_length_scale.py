"""Length-scaled attention (``model.net.attn_scale``): the formula, with every encoding, on both
kernels, with the cache, and per member."""

import math
from functools import partial

import pytest
import torch

from pelab.errors import ConfigError
from pelab.models.attention import Attention
from pelab.models.dims import NetDims
from pelab.models.length_scale import LengthScale, keys_seen
from pelab.models.stacked import stack_members
from pelab.models.transformer import Transformer
from pelab.pe import PE_REGISTRY
from pelab.pe.base import NoPE
from pelab.positions import Positions
from tests.models.test_kv_cache import position_dims, positions, sharpened
from tests.pe.nets import DIGITS

ONE_D = sorted(n for n, c in PE_REGISTRY.items() if c.position_dims != 2)


def attention(scale: str, causal: bool = True) -> Attention:
    from pelab.pe.base import ModelDims

    torch.manual_seed(0)
    pe = NoPE(ModelDims(16, 2, 1, causal, 32))
    return Attention(16, 2, causal, pe, 0, impl="eager", length_scale=scale, train_len=8)


@pytest.mark.parametrize("causal", [True, False])
def test_logn_multiplies_each_querys_logits_by_log_n_over_log_l(causal):
    plain, logn = attention("none", causal), attention("logn", causal)
    logn.load_state_dict(plain.state_dict())
    x, pos = torch.randn(1, 6, 16), Positions.contiguous(6)
    q, k, _ = plain.heads(plain.qkv(x))
    base = torch.einsum("bhid,bhjd->bhij", q, k) * plain.scale
    seen = torch.arange(1, 7) if causal else torch.full((6,), 6)
    want = base * (seen.log() / math.log(8))[:, None]  # [i, 1]
    if causal:
        want = want.masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), -math.inf)
    got = logn.probabilities(logn.length_scale(q, 6, causal), k, pos, None)
    torch.testing.assert_close(got, want.softmax(-1))


def test_ssmax_learns_a_scale_per_head_starting_at_logn():
    ssmax = LengthScale("ssmax", n_heads=2, train_len=8)
    q = torch.ones(1, 2, 4, 3)
    torch.testing.assert_close(ssmax(q, 4, True), LengthScale("logn", 2, 8)(q, 4, True))
    with torch.no_grad():
        ssmax.s.copy_(torch.tensor([[0.5, 2.0]]))
    got = ssmax(q, 4, True)[0, :, :, 0]  # [h, i]
    torch.testing.assert_close(got, torch.tensor([[0.5], [2.0]]) * torch.arange(1, 5).log())
    assert keys_seen(2, 5, True, torch.device("cpu")).tolist() == [4.0, 5.0]  # the last 2 of 5


def test_an_unknown_scale_names_the_valid_choices():
    message = "model.net.attn_scale='ssmx' is not a choice; valid choices: none, logn, ssmax"
    with pytest.raises(ConfigError, match=message):
        NetDims(vocab_size=12, max_len=64, d_model=16, n_heads=2, attn_scale="ssmx")


def scaled_decoder(name: str, scale: str, impl: str = "auto") -> Transformer:
    factory = partial(PE_REGISTRY[name])
    torch.manual_seed(0)  # the encoding's own parameters (sharpened draws the matrices)
    dims = NetDims(
        vocab_size=12, max_len=64, d_model=16, n_heads=2, attn_impl=impl,
        position_dims=position_dims(name), train_max_len=8, attn_scale=scale, digit_tokens=DIGITS,
    )  # fmt: skip
    return sharpened(Transformer(dims, factory, causal=True))


@pytest.mark.parametrize(("scale", "names"), [("ssmax", ONE_D), ("logn", ["rope", "alibi"])])
def test_every_encoding_runs_length_scaled_on_both_kernels_and_with_the_cache(scale, names):
    """One test over the registry (``ssmax``, whose scales the test draws at random; ``logn`` is
    ``ssmax`` at fixed scales): fused = eager where the encoding allows the fused kernel, and
    cached decoding = full forwards where it allows a cache."""
    tokens = torch.randint(0, 12, (2, 7))
    for name in names:
        net = scaled_decoder(name, scale)
        pos = positions(name, 2, 7, randomized=True)
        full = net(tokens, pos)
        assert torch.isfinite(full).all(), name
        if not PE_REGISTRY[name].needs_eager_attention():
            eager = scaled_decoder(name, scale, "eager")
            torch.testing.assert_close(eager(tokens, pos), full, atol=1e-4, rtol=1e-4)
        if net.supports_kv_cache:
            cache = net.new_cache(7)
            steps = [net(tokens[:, :4], pos[:, :4], cache)]
            steps += [net(tokens[:, t : t + 1], pos[:, t : t + 1], cache) for t in range(4, 7)]
            torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-4, rtol=1e-4)


def test_stacked_members_keep_their_own_ssmax_scales():
    nets = [scaled_decoder("rope", "ssmax") for _ in range(2)]
    with torch.no_grad():
        nets[1].blocks[0].attn.length_scale.s.fill_(3.0)
    tokens = torch.randint(0, 12, (2, 7))
    alone = torch.cat([net(tokens) for net in nets])
    stacked = stack_members(nets)
    assert stacked.blocks[0].attn.length_scale.s.shape == (2, 2)
    torch.testing.assert_close(stacked(tokens.repeat(2, 1)), alone, atol=1e-5, rtol=1e-5)


def test_none_leaves_the_model_as_it_was():
    tokens = torch.randint(0, 12, (2, 7))
    plain = scaled_decoder("alibi", "none")
    assert not any("length_scale" in name for name, _ in plain.named_parameters())
    assert not torch.allclose(scaled_decoder("alibi", "logn")(tokens), plain(tokens))


def biases_under(scale: str, pe_name: str, **options) -> list[torch.Tensor]:
    """The logit biases one attention layer hands its kernel, with ``scale`` and an encoding's
    weights drawn the same under every scale, on a sequence past the training length."""
    from pelab.pe.base import ModelDims

    torch.manual_seed(0)
    pe = PE_REGISTRY[pe_name](ModelDims(16, 2, 1, True, 32), **options)
    torch.manual_seed(1)
    attn = Attention(16, 2, True, pe, 0, impl="eager", length_scale=scale, train_len=4)
    seen = []
    attend = attn.attend
    attn.attend = lambda q, k, v, pos, bias: seen.append(bias) or attend(q, k, v, pos, bias)
    attn(
        torch.randn(2, 12, 16, generator=torch.Generator().manual_seed(2)),
        Positions.contiguous(12),
    )
    return seen


@pytest.mark.parametrize("gate", ["query", "key", "query_key"])
def test_grape_a_gates_read_the_query_before_the_length_scale(gate):
    """GRAPE-A's bias is additive: its gates read q as it leaves the projection (the authors'
    code), so under logn its bias is the unscaled model's, while the logits it joins scale."""
    (plain,), (scaled,) = (
        biases_under("none", "grape_a", gate=gate),
        biases_under("logn", "grape_a", gate=gate),
    )
    torch.testing.assert_close(scaled, plain, rtol=0, atol=0)


def test_paths_bias_is_part_of_the_score_and_scales_with_the_logits():
    """PaTH's bias is ``q^T (H...H - I) k``: the length scale multiplies it like ``q^T k``."""
    (plain,), (scaled,) = biases_under("none", "path"), biases_under("logn", "path")
    c = (keys_seen(12, 12, True, torch.device("cpu")).log() / math.log(4))[:, None]  # [i, 1]
    torch.testing.assert_close(scaled, plain * c)


def test_a_composition_refuses_a_content_bias_beside_an_additive_one():
    from pelab.pe.base import ModelDims
    from pelab.pe.composed import ComposedPE

    parts = {"path": PE_REGISTRY["path"], "fox": PE_REGISTRY["fox"]}
    with pytest.raises(ConfigError, match="part 'path'.*scales with the logits"):
        ComposedPE(ModelDims(16, 2, 1, True, 32), parts)
