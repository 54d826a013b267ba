import math
from functools import partial

import pytest
import torch

from pelab.models.attention import Attention
from pelab.models.attention_maps import attention_maps
from pelab.models.dims import NetDims
from pelab.models.encoder_decoder import EncoderDecoder
from pelab.models.transformer import Transformer
from pelab.pe import PE_REGISTRY
from pelab.pe.shaw import ShawPE, clipped_offset_index
from pelab.positions import Positions
from tests.pe.nets import sharp_net


def inputs_of_each_attention(net: torch.nn.Module) -> dict[str, tuple[torch.Tensor, Positions]]:
    """Record the ``(x, pos)`` every ``Attention`` of ``net`` receives, by module name."""
    seen = {}
    for name, module in net.named_modules():
        if isinstance(module, Attention):
            module.register_forward_pre_hook(lambda m, args, name=name: seen.update({name: args}))
    return seen


def position_term(pe, q: torch.Tensor, pos: Positions, layer: int) -> torch.Tensor:
    """The content-free bias, or Shaw's ``q_i . a^K_ij / sqrt(d)``, by hand: ``[b, h, i, j]``."""
    if isinstance(pe, ShawPE):
        a_k = pe.key_table[layer][clipped_offset_index(pos, pe.max_distance, pe.ahead)[0]]
        return torch.einsum("bhid,ijd->bhij", q, a_k) / math.sqrt(q.shape[-1])
    bias = pe.logit_bias(pos, layer)
    return torch.zeros(()) if bias is None else bias


def by_hand(attention: Attention, x: torch.Tensor, pos: Positions) -> torch.Tensor:
    """``softmax(q k^T / sqrt(d) + bias)`` of one self-attention, its mask applied."""
    q, k, _ = attention.heads(attention.qkv(x))
    q, k = attention.pe.transform_qk(q, k, pos, 0)
    logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    logits = logits + position_term(attention.pe, q, pos, attention.layer)
    if attention.causal:
        n = logits.shape[-1]
        logits = logits.masked_fill(torch.ones(n, n).triu(1).bool(), -math.inf)
    return logits.softmax(-1)


KERNELS = {"rope": "fused", "alibi": "fused", "fire": "fused", "shaw": "eager"}


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_maps_are_the_softmax_of_scaled_scores_plus_bias_on_either_kernel(name, causal):
    net = sharp_net(PE_REGISTRY[name], causal, n_layers=3)
    kernel = {"fused": "attend_fused", "eager": "attend_eager"}[KERNELS[name]]
    assert all(block.attn.attend.__name__ == kernel for block in net.blocks)
    tokens = torch.randint(0, 12, (2, 10))
    plain = net(tokens)
    seen = inputs_of_each_attention(net)
    with torch.no_grad(), attention_maps(net) as maps:
        recorded = net(tokens)
    assert torch.allclose(recorded, plain, atol=1e-5)  # explicit == fused, up to rounding
    assert list(maps) == [f"blocks.{layer}.attn" for layer in range(3)]
    for layer, block in enumerate(net.blocks):
        (probs,) = maps[f"blocks.{layer}.attn"]
        assert probs.shape == (2, 2, 10, 10)
        x, pos = seen[f"blocks.{layer}.attn"]
        assert torch.allclose(probs, by_hand(block.attn, x, pos), atol=1e-5)
        assert torch.allclose(probs.sum(-1), torch.ones(2, 2, 10), atol=1e-5)
        if causal:
            assert (probs.triu(diagonal=1) == 0).all()
    if name == "fire":  # each layer's own bias: the maps differ where one bias would not
        assert not torch.allclose(maps["blocks.0.attn"][0], maps["blocks.1.attn"][0], atol=1e-3)
    # afterwards every module has its kernel back
    assert all(block.attn.attend.__name__ == kernel for block in net.blocks)
    assert torch.equal(net(tokens), plain)


def test_urpe_maps_are_the_scaled_probabilities_whose_rows_need_not_sum_to_one():
    net = sharp_net(PE_REGISTRY["urpe"], causal=True, max_len=16)
    torch.manual_seed(1)
    torch.nn.init.normal_(net.pe.parts["toeplitz"].c, mean=1.0, std=0.5)
    torch.nn.init.normal_(net.pe.parts["bias"].bias.weight)
    tokens = torch.randint(0, 12, (2, 8))
    seen = inputs_of_each_attention(net)
    with torch.no_grad(), attention_maps(net) as maps:
        net(tokens)
    for layer, block in enumerate(net.blocks):
        x, pos = seen[f"blocks.{layer}.attn"]
        c = net.pe.parts["toeplitz"].modify_probs(torch.ones(1, 2, 8, 8), pos, layer)
        (probs,) = maps[f"blocks.{layer}.attn"]
        assert torch.allclose(probs, by_hand(block.attn, x, pos) * c, atol=1e-5)
        assert not torch.allclose(probs.sum(-1), torch.ones(2, 2, 8), atol=1e-2)
        assert (probs.triu(diagonal=1) == 0).all()


def test_every_call_is_recorded_in_order_while_decoding_with_a_cache():
    net = sharp_net(PE_REGISTRY["alibi"])
    tokens = torch.randint(0, 12, (1, 6))
    with torch.no_grad(), attention_maps(net) as maps:
        full = net(tokens)
        cache = net.new_cache(6)
        net(tokens[:, :4], cache=cache)
        net(tokens[:, 4:5], cache=cache)
        net(tokens[:, 5:6], cache=cache)
    shapes = [tuple(probs.shape) for probs in maps["blocks.1.attn"]]
    assert shapes == [(1, 2, 6, 6), (1, 2, 4, 4), (1, 2, 1, 5), (1, 2, 1, 6)]
    full_map, *steps = maps["blocks.1.attn"]
    assert torch.allclose(steps[-1][0, :, 0], full_map[0, :, -1], atol=1e-5)
    assert full.shape == (1, 6, 12)


def test_an_encoder_decoder_records_its_encoder_decoder_and_cross_attention():
    torch.manual_seed(0)
    dims = NetDims(vocab_size=12, max_len=16, d_model=16, n_heads=2, n_layers=2)
    net = EncoderDecoder(dims, PE_REGISTRY["t5_bias"])
    source, target = torch.randint(0, 12, (2, 7)), torch.randint(0, 12, (2, 5))
    with torch.no_grad(), attention_maps(net.eval()) as maps:
        net(source, target)
    shapes = {name: tuple(probs.shape) for name, (probs,) in maps.items()}
    assert shapes == {
        "encoder.blocks.0.attn": (2, 2, 7, 7),
        "encoder.blocks.1.attn": (2, 2, 7, 7),
        "decoder.blocks.0.attn": (2, 2, 5, 5),
        "decoder.blocks.0.cross": (2, 2, 5, 7),
        "decoder.blocks.1.attn": (2, 2, 5, 5),
        "decoder.blocks.1.cross": (2, 2, 5, 7),
    }
    assert (maps["decoder.blocks.0.attn"][0].triu(diagonal=1) == 0).all()
    later = torch.ones(7, 7).triu(diagonal=1).bool()  # the encoder is not causal
    assert (maps["encoder.blocks.0.attn"][0][..., later] > 0).all()


def test_the_kernel_comes_back_even_when_the_forward_fails():
    dims = NetDims(vocab_size=12, max_len=16, d_model=16, n_heads=2)
    net = Transformer(dims, partial(PE_REGISTRY["rope"]), causal=True)
    with pytest.raises(IndexError), attention_maps(net):
        net(torch.tensor([[99]]))  # token id out of the vocabulary
    assert all(block.attn.attend == block.attn.attend_fused for block in net.blocks)


def test_a_model_without_attention_is_refused():
    with pytest.raises(ValueError, match="no Attention"), attention_maps(torch.nn.Linear(2, 2)):
        pass
