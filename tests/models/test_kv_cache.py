"""Incremental decoding: a key/value cache computes the same function as full forwards, for
every registered encoding, in the decoder and in the encoder–decoder's decoder."""

from functools import partial

import pytest
import torch

from pelab.model_kinds import DecoderKind, EncoderDecoderKind, _note_full_forwards
from pelab.models.cache import KVCache, LayerCache
from pelab.models.dims import NetDims
from pelab.models.encoder_decoder import EncoderDecoder
from pelab.models.transformer import Transformer
from pelab.pe import PE_REGISTRY
from pelab.pe.rotary_scaling import SCALINGS
from pelab.positions import contiguous

ALL = sorted(PE_REGISTRY)
CACHED = [n for n in ALL if PE_REGISTRY[n].supports_kv_cache]
BIDIRECTIONAL = [n for n in CACHED if not PE_REGISTRY[n].causal_only]
VOCAB, MAX_LEN = 12, 64


def sharpened(net: torch.nn.Module) -> torch.nn.Module:
    """Matrices drawn large (std 1), so attention is sharp, positions visibly matter and greedy
    answers vary from token to token."""
    torch.manual_seed(0)
    for p in net.parameters():
        if p.dim() > 1:
            torch.nn.init.normal_(p, std=1.0)
    return net.eval()


def position_dims(name: str) -> int:
    return PE_REGISTRY[name].position_dims or 1


def decoder(name: str, **options) -> Transformer:
    factory = partial(PE_REGISTRY[name], **options)
    return sharpened(Transformer(small(name), factory, causal=True))


def encoder_decoder(name: str) -> EncoderDecoder:
    return sharpened(EncoderDecoder(small(name), PE_REGISTRY[name]))


def small(name: str) -> NetDims:
    """2 heads of 8 dims, positions of the encoding's coordinates."""
    sizes = dict(vocab_size=VOCAB, max_len=MAX_LEN, d_model=16, n_heads=2)
    return NetDims(**sizes, position_dims=position_dims(name))


def positions(name: str, batch: int, n: int, randomized: bool) -> torch.Tensor:
    """Positions for ``n`` tokens that the encoding reads: 1-D contiguous or a sorted
    random subset of ``[0, MAX_LEN)`` per row; 2-D (row, col) cells of a 4-wide grid or random
    cells of an 8 x 8 grid."""
    g = torch.Generator().manual_seed(n)
    if position_dims(name) == 1:
        if not randomized:
            return contiguous(n)
        return torch.rand(batch, MAX_LEN, generator=g).topk(n).indices.sort().values
    if not randomized:
        t = torch.arange(n)
        return torch.stack((t // 4, t % 4), dim=-1)[None]
    return torch.randint(0, 8, (batch, n, 2), generator=g)


def cut(pos: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    return pos[:, start:stop]


RANDOMIZED = pytest.mark.parametrize("randomized", [False, True], ids=["contiguous", "randomized"])


@RANDOMIZED
@pytest.mark.parametrize("name", CACHED)
def test_decoder_with_a_cache_computes_the_full_forward(name, randomized):
    net = decoder(name)
    tokens = torch.randint(0, VOCAB, (3, 11))
    pos = positions(name, 3, 11, randomized)
    full = net(tokens, pos)
    cache = net.new_cache(11)
    steps = [net(tokens[:, :4], cut(pos, 0, 4), cache)]  # a prefix, then one token per step
    steps += [net(tokens[:, t : t + 1], cut(pos, t, t + 1), cache) for t in range(4, 11)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-4, rtol=1e-4)
    # greedy decoding through the model kind: the same tokens as full forwards at every step
    prompt, canonical = tokens[:, :5].clamp(min=3), positions(name, 3, 5 + 6 + 2, randomized)
    cached = DecoderKind.predict(net, prompt, 6, canonical)
    assert torch.equal(cached, DecoderKind.predict(net, prompt, 6, canonical, use_cache=False))


@RANDOMIZED
@pytest.mark.parametrize("name", BIDIRECTIONAL)
def test_encoder_decoder_with_a_cache_computes_teacher_forcing(name, randomized):
    net = encoder_decoder(name)
    source, target = torch.randint(0, VOCAB, (3, 7)), torch.randint(0, VOCAB, (3, 6))
    source_pos, target_pos = (positions(name, 3, n, randomized) for n in (7, 6))
    full = net(source, target, source_pos, target_pos)
    memory, cache = net.encode(source, source_pos), net.new_cache(6)
    steps = [
        net.decode(target[:, t : t + 1], memory, cut(target_pos, t, t + 1), cache)
        for t in range(6)
    ]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-4, rtol=1e-4)
    prompt, canonical = source[:, :5].clamp(min=3), positions(name, 3, 5 + 6 + 2, randomized)
    cached = EncoderDecoderKind.predict(net, prompt, 6, canonical)
    uncached = EncoderDecoderKind.predict(net, prompt, 6, canonical, use_cache=False)
    assert torch.equal(cached, uncached)


def fed_lengths(net: torch.nn.Module, method: str = "forward") -> list[int]:
    """Records how many tokens each call of ``net.<method>`` feeds."""
    lengths: list[int] = []
    original = getattr(net, method)

    def spy(tokens, *args, **kwargs):
        lengths.append(tokens.shape[1])
        return original(tokens, *args, **kwargs)

    setattr(net, method, spy)
    return lengths


def test_cached_decoding_feeds_the_prompt_once_then_one_token_per_step():
    net = decoder("rope")
    calls = []
    net.register_forward_pre_hook(lambda module, args: calls.append(args[0].shape[1]))
    DecoderKind.predict(net, torch.randint(3, VOCAB, (2, 5)), 4, contiguous(11))
    assert calls == [7, 1, 1, 1]  # BOS + 5 prompt tokens + SEP, then each prediction but the last
    calls.clear()
    DecoderKind.predict(net, torch.randint(3, VOCAB, (2, 5)), 4, contiguous(11), use_cache=False)
    assert calls == [7, 8, 9, 10]


def test_encoder_decoder_encodes_once_and_decodes_one_token_per_step():
    net = encoder_decoder("t5_bias")
    encoded, decoded = fed_lengths(net, "encode"), fed_lengths(net, "decode")
    EncoderDecoderKind.predict(net, torch.randint(3, VOCAB, (2, 5)), 4, contiguous(11))
    assert encoded == [7] and decoded == [1, 1, 1, 1]


def test_cross_attention_keys_are_projected_once_per_cache():
    net = encoder_decoder("none")
    memory, cache = net.encode(torch.randint(0, VOCAB, (2, 5))), net.new_cache(3)
    net.decode(torch.randint(0, VOCAB, (2, 1)), memory, cache=cache)
    stored = cache.cross_attn[0].buffer
    net.decode(torch.randint(0, VOCAB, (2, 1)), memory, cache=cache)
    assert cache.cross_attn[0].buffer is stored and stored.shape == (2, 2, 2, 5, 8)


@pytest.mark.parametrize("scaling", [s for s in SCALINGS if s != "none"])
def test_rope_scalings_use_the_cache_unless_their_frequencies_follow_the_length(scaling):
    options = dict(scaling=scaling, scaling_factor=4.0, original_max_len=6)
    net = decoder("rope", **options)
    tokens = torch.randint(0, VOCAB, (2, 12))  # beyond original_max_len
    full = net(tokens)
    cache = KVCache(12, n_layers=2)  # built directly: bypasses the support check
    steps = torch.cat([net(tokens[:, t : t + 1], cache=cache) for t in range(12)], dim=1)
    same = torch.allclose(steps, full, atol=1e-4, rtol=1e-4)
    # dynamic NTK rotates each key with the frequencies of the length when it was fed, a full
    # forward with those of the final length: a cache would change the function
    assert same == (scaling != "dynamic_ntk") == net.supports_kv_cache


def test_an_encoding_without_cache_support_falls_back_to_full_forwards(caplog):
    net = decoder("rope", scaling="dynamic_ntk", scaling_factor=2.0, original_max_len=6)
    calls = []
    net.register_forward_pre_hook(lambda module, args: calls.append(args[0].shape[1]))
    _note_full_forwards.cache_clear()  # the note is logged once per process
    with caplog.at_level("INFO", logger="pelab.model_kinds"):
        DecoderKind.predict(net, torch.randint(3, VOCAB, (2, 5)), 3, contiguous(10))
    assert calls == [7, 8, 9]
    assert "re-runs the whole prefix" in caplog.text
    with pytest.raises(ValueError, match="cannot decode with a key/value cache"):
        net.new_cache(10)


def test_an_encoder_offers_no_cache():
    net = Transformer(small("rope"), PE_REGISTRY["rope"], causal=False)
    assert not net.supports_kv_cache


def test_the_cache_keeps_positions_and_refuses_to_overflow():
    cache = KVCache(4, n_layers=1)
    first = cache.advance(3, torch.tensor([[2, 5, 9]]), torch.device("cpu"))
    assert first.q.tolist() == first.k.tolist() == [[2, 5, 9]]
    step = cache.advance(1, torch.tensor([[11], [12]]), torch.device("cpu"))  # per-row positions
    assert step.q.tolist() == [[11], [12]]
    assert step.k.tolist() == [[2, 5, 9, 11], [2, 5, 9, 12]]
    default = KVCache(4, n_layers=1)
    default.advance(2, None, torch.device("cpu"))
    assert default.advance(1, None, torch.device("cpu")).k.tolist() == [[0, 1, 2]]
    layer = LayerCache(capacity=2)
    layer.append(torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 2, 4))
    with pytest.raises(ValueError, match="holds 2 tokens"):
        layer.append(torch.zeros(1, 1, 1, 4), torch.zeros(1, 1, 1, 4))
