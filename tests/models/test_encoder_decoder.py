"""The encoder–decoder model kind: structure, causality, cross-attention, training runs."""

import json
from functools import partial
from pathlib import Path

import pytest
import torch

from pelab.errors import ConfigError
from pelab.model_kinds import EncoderDecoderKind, greedy
from pelab.models.dims import NetDims
from pelab.models.encoder_decoder import EncoderDecoder
from pelab.models.transformer import Memory
from pelab.pe import PE_REGISTRY
from pelab.train import train

VOCAB = 12
# one encoding of each hook family: none, embed, transform_qk, logit_bias, modify_* (eager)
FAMILIES = ["none", "sinusoidal", "rope", "t5_bias", "shaw", "urpe"]


def build(name: str, **sizes) -> EncoderDecoder:
    dims = NetDims(**{**dict(vocab_size=VOCAB, max_len=32, d_model=16, n_heads=2), **sizes})
    torch.manual_seed(0)
    net = EncoderDecoder(dims, partial(PE_REGISTRY[name]))
    for p in net.parameters():  # large weights: sharp attention, positions visibly matter
        if p.dim() > 1:
            torch.nn.init.normal_(p, std=1.0)
    return net.eval()


def test_the_encoder_and_the_decoder_each_have_an_encoding_built_for_their_attention():
    net = build("t5_bias")
    encoder, decoder = net.encoder.pe, net.decoder.pe
    assert encoder is not decoder and type(encoder) is type(decoder) is PE_REGISTRY["t5_bias"]
    assert not encoder.dims.causal and decoder.dims.causal
    assert encoder.bidirectional and not decoder.bidirectional  # T5 buckets per direction
    # shared by the layers of the encoder, or of the decoder, only
    assert all(block.attn.pe is encoder for block in net.encoder.blocks)
    assert all(block.attn.pe is decoder for block in net.decoder.blocks)


def test_cross_attention_carries_no_encoding():
    net = build("alibi")
    for block in net.decoder.blocks:
        assert PE_REGISTRY["none"] is type(block.cross.pe)
    assert all(block.cross is None for block in net.encoder.blocks)


def test_parameter_counts_add_the_encoder_the_decoder_and_both_encodings():
    d, v, layers, heads = 16, VOCAB, 2, 2
    net = build("t5_bias", n_layers=layers)
    norm, attention, mlp = 2 * d, 4 * d * d, (d * 4 * d + 4 * d) + (4 * d * d + d)
    encoder = layers * (2 * norm + attention + mlp) + norm
    decoder = layers * (3 * norm + 2 * attention + mlp) + norm  # + cross-attention and its norm
    encodings = 2 * 32 * heads  # one T5 table (32 buckets x heads) each
    counts = net.num_params()
    assert counts["pe"] == encodings
    assert counts["total"] == v * d + encoder + decoder + encodings + d * v  # + embedding, head
    assert counts["total"] == sum(p.numel() for p in net.parameters())


def test_an_encoding_for_causal_models_only_refuses_the_encoder_clearly():
    with pytest.raises(ConfigError, match="encoder of model=encoder_decoder: pe=xpos .* causal"):
        build("xpos")


@pytest.mark.parametrize("name", FAMILIES)
def test_no_decoder_logit_depends_on_a_later_target_token(name):
    net = build(name)
    source, target = torch.randint(3, VOCAB, (2, 6)), torch.randint(3, VOCAB, (2, 7))
    changed = target.clone()
    changed[:, 4:] = (changed[:, 4:] + 1 - 3) % (VOCAB - 3) + 3
    a, b = net(source, target), net(source, changed)
    torch.testing.assert_close(a[:, :4], b[:, :4])
    assert not torch.allclose(a[:, 4:], b[:, 4:], atol=1e-3)


@pytest.mark.parametrize("name", FAMILIES)
def test_the_encoder_reads_the_whole_source_in_both_directions(name):
    net = build(name)
    source = torch.randint(3, VOCAB, (2, 6))
    changed = source.clone()
    changed[:, -1] = (changed[:, -1] + 1 - 3) % (VOCAB - 3) + 3
    first = net.encode(source).states[:, 0]  # BOS, five tokens before the change
    assert not torch.allclose(first, net.encode(changed).states[:, 0], atol=1e-3)


@pytest.mark.parametrize("name", ["rope", "t5_bias", "shaw", "sinusoidal"])
def test_decoding_is_invariant_to_permuting_the_encoder_outputs(name):
    # cross-attention has no positions: only the encoder's representations carry them
    net = build(name)
    source, target = torch.randint(3, VOCAB, (2, 6)), torch.randint(3, VOCAB, (2, 4))
    memory = net.encode(source)
    perm = torch.tensor([4, 2, 0, 5, 1, 3])
    moved = Memory(memory.states[:, perm], memory.positions[:, perm])
    torch.testing.assert_close(net.decode(target, memory), net.decode(target, moved))


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("cached", [True, False])
def test_teacher_forcing_gives_the_logits_of_greedy_decoding(name, cached):
    # the training path (one forward over SEP a_1..a_{m-1}) and the decode path compute the same
    # function: fed the greedy answer, teacher forcing reproduces every step's logits
    net = build(name)
    prompt = torch.randint(3, VOCAB, (3, 5))
    canonical = torch.rand(3, 30).topk(5 + 5 + 2).indices.sort().values  # randomized positions
    source, _ = EncoderDecoderKind.teacher_forcing(prompt, prompt)
    source_pos, target_pos = EncoderDecoderKind.split_positions(canonical, 5, 5)
    memory = net.encode(source, source_pos)
    cache = net.new_cache(5) if cached else None
    steps = []

    def step(tokens, pos):
        steps.append(net.decode(tokens, memory, pos, cache)[:, -1])
        return steps[-1][:, None]

    answer = greedy(step, source[:, -1:], 5, target_pos, cached)
    assert torch.equal(answer, EncoderDecoderKind.predict(net, prompt, 5, canonical))
    forced = EncoderDecoderKind.answer_logits(net, prompt, answer, canonical)
    torch.testing.assert_close(forced, torch.stack(steps, dim=1), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("pe", ["none", "sinusoidal", "rope", "t5_bias", "shaw"])
@pytest.mark.integration
def test_encoder_decoder_trains_and_evaluates_end_to_end(tiny_cfg, pe):
    cfg = tiny_cfg("model=encoder_decoder", f"pe={pe}", "task=copy")
    train(cfg)
    res = json.loads((Path(cfg.paths.output_dir) / "results.json").read_text())
    assert res["status"] == "completed" and res["choices"]["model"] == "encoder_decoder"
    for metrics in res["metrics"]["test"].values():
        assert 0.0 <= metrics["exact_match"] <= metrics["token_acc"] <= 1.0
    if pe in TINY_PE_PARAMS:
        assert res["params"]["pe"] == TINY_PE_PARAMS[pe]


# encoding parameters of the encoder and the decoder at the tiny size (d_model 16, 2 heads, 1
# layer each)
TINY_PE_PARAMS = {
    "none": 0,
    "sinusoidal": 0,
    "rope": 0,
    "t5_bias": 2 * 32 * 2,  # a 32-bucket table per head, in the encoder and the decoder
    # key and value tables of head_dim 8 per offset: 2k + 1 = 33 offsets in the encoder,
    # k + 1 = 17 in the decoder (k = 16)
    "shaw": 2 * 33 * 8 + 2 * 17 * 8,
}
