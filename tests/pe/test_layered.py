"""Per-layer schedules (``pe.layers``): the encoding in some layers, NoPE in the others, and Llama
4's NoPE-layer query temperature."""

import math
from functools import partial

import pytest
import torch

from pelab.assembly import build_encoding
from pelab.errors import ConfigError
from pelab.models.cache import KVCache
from pelab.pe import PE_REGISTRY
from pelab.pe.base import ModelDims, NoPE
from pelab.pe.bias import AlibiPE
from pelab.pe.layered import LayeredPE, scheduled
from pelab.pe.rotary import RotaryPE
from pelab.positions import Positions
from pelab.reliability.checks.validate import check_types
from tests.pe.nets import sharp_net

DIMS = ModelDims(d_model=16, n_heads=2, n_layers=4, causal=True, max_len=64)


def test_a_nope_layer_answers_every_hook_as_nope_and_the_others_as_the_encoding():
    rope = LayeredPE(DIMS, RotaryPE, ["rope", "rope", "rope", "none"])
    alibi = LayeredPE(DIMS, AlibiPE, ["none", "alibi", "none", "alibi"])
    q, k, pos = torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8), Positions.contiguous(5)
    plain_q, plain_k = RotaryPE(DIMS).transform_qk(q, k, pos, 0)
    for layer in range(3):
        got_q, got_k = rope.transform_qk(q, k, pos, layer)
        assert torch.equal(got_q, plain_q) and torch.equal(got_k, plain_k)
    assert all(t is s for t, s in zip(rope.transform_qk(q, k, pos, 3), (q, k), strict=True))
    expected = AlibiPE(DIMS).logit_bias(pos, 1)
    assert alibi.logit_bias(pos, 0) is None and alibi.logit_bias(pos, 2) is None
    assert torch.equal(alibi.logit_bias(pos, 1), expected)
    assert torch.equal(alibi.logit_bias(pos, 3), expected)


def test_a_schedule_of_nope_only_is_the_nope_model_and_of_the_encoding_only_the_plain_one():
    tokens = torch.randint(0, 12, (2, 9))
    nope = sharp_net(NoPE)(tokens)
    all_none = sharp_net(scheduled(RotaryPE, ["none", "none"]))(tokens)
    torch.testing.assert_close(all_none, nope, atol=0, rtol=0)
    rope = sharp_net(RotaryPE)(tokens)
    torch.testing.assert_close(sharp_net(scheduled(RotaryPE, ["rope", "rope"]))(tokens), rope)
    assert not torch.allclose(sharp_net(scheduled(RotaryPE, ["rope", "none"]))(tokens), rope)
    assert scheduled(RotaryPE) is RotaryPE  # no schedule: the encoding itself, as before


def test_the_nope_temperature_is_llama_4s_formula_and_leaves_keys_alone():
    pe = LayeredPE(DIMS, RotaryPE, ["rope"] * 3 + ["none"], 0.5, nope_temperature_length=4)
    q, k = torch.ones(1, 2, 12, 8), torch.ones(1, 2, 12, 8)
    got_q, got_k = pe.transform_qk(q, k, Positions.contiguous(12), 3)
    for p in range(12):  # 1 + beta log(1 + floor((p + 1) / 4))
        want = 1 + 0.5 * math.log(1 + (p + 1) // 4)
        assert got_q[0, 1, p, 0].item() == pytest.approx(want, rel=1e-6)
    assert got_q[0, 0, 2, 0].item() == 1.0 and torch.equal(got_k, k)  # below the first step


@pytest.mark.parametrize("name", ["rope", "alibi", "fox"])
def test_a_schedule_decodes_with_the_cache_as_with_full_forwards_on_both_kernels(name):
    layers = [name, "none"]
    factory = scheduled(PE_REGISTRY[name], layers, 0.3, nope_temperature_length=2)
    tokens = torch.randint(0, 12, (2, 9))
    eager = sharp_net(factory, impl="eager")
    fused = sharp_net(factory, impl="fused")
    torch.testing.assert_close(fused(tokens), eager(tokens), atol=1e-5, rtol=1e-5)
    if not eager.supports_kv_cache:  # FoX: no cache, said so
        return
    cache = KVCache(9, 2)
    steps = [eager(tokens[:, :3], cache=cache)]
    steps += [eager(tokens[:, t : t + 1], cache=cache) for t in range(3, 9)]
    torch.testing.assert_close(torch.cat(steps, dim=1), eager(tokens), atol=1e-5, rtol=1e-5)


def test_a_scheduled_encodings_parameters_reach_only_through_its_layers():
    net = sharp_net(scheduled(partial(PE_REGISTRY["t5_bias"]), ["t5_bias", "none"]))
    net(torch.randint(0, 12, (2, 7))).sum().backward()
    grads = [p.grad for p in net.pe.parameters()]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)


@pytest.mark.parametrize(
    ("factory", "layers", "temperature", "message"),
    [
        (RotaryPE, ["rope", "none"], 0.0, "each of the 4 layers"),
        (RotaryPE, ["rope", "alibi", "rope", "none"], 0.0, "each 'rope' or 'none'"),
        (PE_REGISTRY["sinusoidal"], ["sinusoidal"] * 3 + ["none"], 0.0, "token embeddings"),
        (RotaryPE, ["rope"] * 4, 0.1, "has none"),
        (RotaryPE, ["rope"] * 3 + ["none"], -1.0, "must be >= 0"),
    ],
)
def test_a_bad_schedule_is_refused_naming_the_valid_choices(factory, layers, temperature, message):
    with pytest.raises(ConfigError, match=message):
        LayeredPE(DIMS, factory, layers, temperature)


def test_a_temperature_without_a_schedule_is_refused():
    with pytest.raises(ConfigError, match="set pe.layers too"):
        scheduled(RotaryPE, None, 0.1)


def test_the_schedule_is_an_option_of_every_encoding_on_the_command_line(tiny_cfg):
    cfg = tiny_cfg("pe=alibi", "pe.layers=[alibi,none]", "model.net.n_layers=2")
    check_types(cfg)  # not an option of AlibiPE's constructor, yet accepted
    pe = build_encoding(cfg)(ModelDims(16, 2, 2, True, 32))
    assert isinstance(pe, LayeredPE) and pe.active == (True, False)
    assert type(build_encoding(tiny_cfg("pe=alibi"))(DIMS)) is AlibiPE
    with pytest.raises(ConfigError, match=r"pe.nope_temperature=-1.0 is out of range"):
        check_types(tiny_cfg("pe.nope_temperature=-1.0"))
