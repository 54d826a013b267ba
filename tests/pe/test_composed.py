from functools import partial

import pytest
import torch

from pelab.errors import ConfigError
from pelab.models.attention import Attention
from pelab.models.dims import NetDims
from pelab.models.transformer import Transformer
from pelab.pe import PE_REGISTRY, ModelDims
from pelab.pe.absolute import SinusoidalPE
from pelab.pe.bias import AlibiPE, T5BiasPE
from pelab.pe.complex_order import ComplexOrderPE
from pelab.pe.composed import ComposedPE
from pelab.pe.fire import FirePE
from pelab.pe.rotary import RotaryPE, XPosPE
from pelab.pe.shaw import ShawPE
from pelab.positions import Positions
from tests.pe.nets import sharp_net

DIMS = ModelDims(d_model=16, n_heads=2, n_layers=2, causal=True, max_len=32)


def composed(*names: str, dims: ModelDims = DIMS) -> ComposedPE:
    torch.manual_seed(0)
    return ComposedPE(dims, {name: PE_REGISTRY[name] for name in names})


def randomised(pe: ComposedPE) -> ComposedPE:
    """Every parameter drawn at random, so no part is an identity (T5 starts at zero)."""
    torch.manual_seed(1)
    for p in pe.parameters():
        torch.nn.init.normal_(p)
    return pe


def test_hooks_chain_the_parts_in_order():
    pe = composed("sinusoidal", "rope")
    sinusoidal, rope = pe.parts["sinusoidal"], pe.parts["rope"]
    pos = Positions.contiguous(5, offset=3)
    x = torch.randn(2, 5, 16)
    assert torch.equal(
        pe.embed(x, torch.zeros(2, 5, dtype=torch.long), pos), x + sinusoidal.position_vectors(pos)
    )
    q, k = torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    for got, want in zip(
        pe.transform_qk(q, k, pos, 0), rope.transform_qk(q, k, pos, 0), strict=True
    ):
        assert torch.equal(got, want)
    # two embeddings that do not commute: the sinusoid is added, then the sum turned
    vocab = ModelDims(16, 2, 2, True, 32, vocab_size=12)
    pe = randomised(ComposedPE(vocab, {"sin": SinusoidalPE, "turn": ComplexOrderPE}))
    sinusoidal, turn = pe.parts["sin"], pe.parts["turn"]
    tokens = torch.randint(0, 12, (2, 5))
    chained = pe.embed(x, tokens, pos)
    assert torch.allclose(chained, turn.embed(sinusoidal.embed(x, tokens, pos), tokens, pos))
    reversed_ = sinusoidal.embed(turn.embed(x, tokens, pos), tokens, pos)
    assert not torch.allclose(chained, reversed_, atol=1e-3)
    # modify_* hooks run part after part: Shaw's key term, then (identity) rope's
    pe = randomised(composed("rope", "shaw"))
    logits = torch.randn(2, 2, 5, 5)
    shaw = pe.parts["shaw"]
    assert torch.equal(
        pe.modify_logits(logits, q, k, pos, 1), shaw.modify_logits(logits, q, k, pos, 1)
    )
    probs = torch.rand(2, 2, 5, 5)
    out = torch.randn(2, 2, 5, 8)
    assert torch.equal(
        pe.modify_output(out, probs, pos, 0), shaw.modify_output(out, probs, pos, 0)
    )


def test_logit_bias_is_the_sum_of_the_parts_biases_per_layer():
    pe = randomised(composed("alibi", "fire"))
    alibi, fire = pe.parts["alibi"], pe.parts["fire"]
    pos = Positions.contiguous(6)
    for layer in (0, 1):
        expected = alibi.logit_bias(pos, layer) + fire.logit_bias(pos, layer)
        assert torch.allclose(pe.logit_bias(pos, layer), expected)
    assert not torch.allclose(pe.logit_bias(pos, 0), pe.logit_bias(pos, 1), atol=1e-3)


def test_a_bias_all_layers_share_is_summed_once_per_forward():
    pe = randomised(composed("alibi", "t5_bias"))
    pos = Positions.contiguous(6)
    assert pe.logit_bias(pos, 0) is pe.logit_bias(pos, 1)
    single = composed("rope", "alibi")  # one bias: the part's own tensor
    assert single.logit_bias(pos, 0) is single.parts["alibi"].logit_bias(pos, 0)
    assert composed("rope", "sinusoidal").logit_bias(pos, 0) is None


@pytest.mark.parametrize(
    ("names", "eager"),
    [(("rope", "alibi"), False), (("sinusoidal", "fire"), False), (("alibi", "shaw"), True)],
)
def test_attention_runs_eager_only_when_a_part_needs_it(names, eager):
    pe = composed(*names)
    assert pe.needs_eager_attention() == eager
    attention = Attention(16, 2, True, pe, layer=0)
    assert attention.attend == (attention.attend_eager if eager else attention.attend_fused)
    assert ComposedPE.needs_eager_attention()  # a class alone cannot know its parts


@pytest.mark.parametrize("causal", [True, False])
def test_fused_and_eager_compute_the_same_composition(causal):
    parts = {"rope": RotaryPE, "alibi": AlibiPE, "fire": FirePE}
    tokens = torch.randint(0, 12, (3, 10))
    fused = sharp_net(partial(ComposedPE, parts=parts), causal, impl="fused")
    eager = sharp_net(partial(ComposedPE, parts=parts), causal, impl="eager")
    assert torch.allclose(fused(tokens), eager(tokens), atol=1e-5)


def test_a_composed_decoder_decodes_with_a_cache_as_with_full_forwards():
    parts = {"rope": RotaryPE, "t5": T5BiasPE, "shaw": ShawPE}
    net = sharp_net(partial(ComposedPE, parts=parts))
    tokens = torch.randint(0, 12, (2, 9))
    full = net(tokens)
    cache = net.new_cache(9)
    steps = [net(tokens[:, :4], cache=cache)] + [
        net(tokens[:, t : t + 1], cache=cache) for t in range(4, 9)
    ]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)


def test_properties_combine_the_parts():
    both = composed("xpos", "alibi")
    assert both.causal_only and both.supports_kv_cache and both.position_dims == 1
    rope = partial(RotaryPE, scaling="dynamic_ntk", scaling_factor=2.0, original_max_len=16)
    dynamic = ComposedPE(DIMS, {"rope": rope, "alibi": AlibiPE})
    assert not dynamic.supports_kv_cache  # one part cannot use a cache
    assert composed("none", "cope").position_dims is None  # no part reads positions
    assert composed("cope", "alibi").position_dims == 1


@pytest.mark.parametrize(
    ("names", "shift"),
    [
        (("rope", "alibi"), "relative"),
        (("none", "cope"), "relative"),
        (("alibi", "fire"), "relative_below_threshold"),
        (("fire", "sinusoidal"), "absolute"),
        (("sinusoidal", "alibi"), "absolute"),
    ],
)
def test_the_shift_class_is_the_least_invariant_of_the_parts(names, shift):
    assert composed(*names).shift == shift


def test_shift_classes_hold_through_the_model():
    tokens = torch.randint(0, 12, (2, 9))
    base = torch.arange(9)
    relative = sharp_net(partial(ComposedPE, parts={"rope": RotaryPE, "alibi": AlibiPE}))
    assert torch.allclose(relative(tokens, base), relative(tokens, base + 13), atol=1e-4)
    absolute = sharp_net(partial(ComposedPE, parts={"sin": SinusoidalPE, "alibi": AlibiPE}))
    assert not torch.allclose(absolute(tokens, base), absolute(tokens, base + 13), atol=1e-3)


def test_a_part_that_refuses_the_model_names_the_composition_and_the_part():
    encoder = ModelDims(16, 2, 2, causal=False, max_len=32)
    with pytest.raises(ConfigError, match=r"pe=ComposedPE \(part 'xpos'\): pe=xpos .*causal"):
        composed("alibi", "xpos", dims=encoder)
    with pytest.raises(ConfigError, match="at least one part"):
        ComposedPE(DIMS, {})


def test_parameters_live_under_each_parts_name():
    parts = {"t5": T5BiasPE, "xpos": XPosPE}
    net = Transformer(NetDims(vocab_size=12, max_len=32), partial(ComposedPE, parts=parts), True)
    names = [name for name, _ in net.named_parameters() if name.startswith("pe.")]
    assert names == ["pe.parts.t5.bias.weight"]
