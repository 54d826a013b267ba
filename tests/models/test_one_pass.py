"""Validation by one pass (issue 53, item 1): an answer is entirely right under greedy decoding
iff every argmax of one teacher-forced pass is right. Checked in its strongest form: teacher
forcing a model on its own greedy answer gives back that answer, token for token, for every
registered encoding and every model kind (decoder, encoder, bare encoder, encoder-decoder),
contiguous and randomized positions, and a layer schedule; the one case where it cannot hold
(RoPE with a length-dependent scaling) is declared (``prefix_only``) and validation then decodes
greedily (tests/test_lit_module.py)."""

from functools import partial

import pytest
import torch

from pelab.model_kinds import BareEncoderKind, DecoderKind, EncoderDecoderKind, EncoderKind
from pelab.models.dims import NetDims
from pelab.models.encoder_decoder import EncoderDecoder
from pelab.models.transformer import Transformer
from pelab.pe import PE_REGISTRY
from pelab.pe.layered import LayeredPE
from tests.models.test_kv_cache import (
    MAX_LEN,
    RANDOMIZED,
    VOCAB,
    position_dims,
    positions,
    sharpened,
)
from tests.pe.nets import DIGITS

ALL = sorted(PE_REGISTRY)
BIDIRECTIONAL = [n for n in ALL if not PE_REGISTRY[n].causal_only]
N, M = 5, 6  # prompt and answer tokens


def transformer(name: str, causal: bool = True, factory=None, **options) -> Transformer:
    """A 2-layer model of ``pe=name`` (``DIGITS`` its digit tokens, for pe=abacus)."""
    factory = factory or partial(PE_REGISTRY[name], **options)
    return sharpened(Transformer(small(name), factory, causal))


def decoder(name: str, **options) -> Transformer:
    return transformer(name, True, **options)


def encoder(name: str) -> Transformer:
    return transformer(name, False)


def encoder_decoder(name: str) -> EncoderDecoder:
    return sharpened(EncoderDecoder(small(name), PE_REGISTRY[name]))


def small(name: str) -> NetDims:
    """2 heads of 8 dims (``DIGITS`` its digit tokens, for pe=abacus)."""
    return NetDims(
        vocab_size=VOCAB,
        max_len=MAX_LEN,
        d_model=16,
        n_heads=2,
        position_dims=position_dims(name),
        digit_tokens=DIGITS,
    )


def chained(net: torch.nn.Module, scale: float = 6.0) -> torch.nn.Module:
    """``net`` (sharpened) with large token embeddings and a head that maps each token's
    embedding to another token (a fixed permutation): each output leans on its own token, so
    greedy answers vary along the answer and between prompts, while attention and positions
    still move them (random weights alone answer one token everywhere)."""
    with torch.no_grad():
        table = net.tok_emb.weight.mul_(scale)  # [1, V, d]
        perm = torch.randperm(table.shape[1], generator=torch.Generator().manual_seed(0))
        net.head.weight.copy_(table[:, perm.argsort()])
    return net


def teacher_forcing_gives_back_greedy(kind, net, randomized: bool, name: str) -> bool:
    """Greedy answers of ``net``; one teacher-forced pass on them predicts them again, and an
    answer with one token changed is predicted right up to that token, not as a whole."""
    net = chained(net)
    prompt = torch.randint(3, VOCAB, (8, N), generator=torch.Generator().manual_seed(1))
    canonical = positions(name, 8, N + M + 2, randomized)
    greedy = kind.predict(net, prompt, M, canonical)
    with torch.no_grad():
        forced = kind.answer_logits(net, prompt, greedy, canonical).argmax(dim=-1)
    assert torch.equal(forced, greedy), (forced, greedy)
    return True


def test_the_check_can_fail_an_answer_fed_one_token_late_is_not_given_back():
    """On a model whose answers vary, teacher forcing that feeds the answer one token late
    (the shift a wrong slice would make) does not give greedy's answer back."""
    net = chained(decoder("rope"))
    prompt = torch.randint(3, VOCAB, (8, N), generator=torch.Generator().manual_seed(1))
    canonical = positions("rope", 8, N + M + 2, False)
    greedy = DecoderKind.predict(net, prompt, M, canonical)
    assert greedy.unique().numel() > 2
    late = torch.cat((greedy[:, :1], greedy[:, :-1]), dim=1)
    with torch.no_grad():
        forced = DecoderKind.answer_logits(net, prompt, late, canonical).argmax(dim=-1)
    assert not torch.equal(forced, greedy)


@RANDOMIZED
@pytest.mark.parametrize("name", ALL)
def test_a_decoder_teacher_forced_on_its_greedy_answer_gives_it_back(name, randomized):
    net = decoder(name)
    assert net.prefix_only
    assert teacher_forcing_gives_back_greedy(DecoderKind, net, randomized, name)


@pytest.mark.parametrize("kind", [EncoderKind, BareEncoderKind], ids=["encoder", "bare"])
@pytest.mark.parametrize("name", [n for n in BIDIRECTIONAL if position_dims(n) == 1])
def test_an_encoders_one_pass_is_its_prediction(name, kind):
    assert teacher_forcing_gives_back_greedy(kind, encoder(name), False, name)


@RANDOMIZED
@pytest.mark.parametrize("name", BIDIRECTIONAL)
def test_an_encoder_decoder_teacher_forced_on_its_greedy_answer_gives_it_back(name, randomized):
    net = encoder_decoder(name)
    assert net.prefix_only
    assert teacher_forcing_gives_back_greedy(EncoderDecoderKind, net, randomized, name)


@RANDOMIZED
def test_a_layer_schedule_gives_it_back(randomized):
    """RoPE in the first layer, NoPE in the second (``pe.layers=[rope,none]``)."""
    schedule = partial(LayeredPE, base=PE_REGISTRY["rope"], layers=["rope", "none"])
    net = transformer("rope", factory=schedule)
    assert net.prefix_only
    assert teacher_forcing_gives_back_greedy(DecoderKind, net, randomized, "rope")


def test_a_length_dependent_scaling_breaks_it_and_says_so():
    """Dynamic NTK follows the whole sequence's length: beyond ``original_max_len`` a full pass
    rotates every position as the longest sees it, a prefix alone does not, so an output
    depends on what follows it; the encoding declares it (``prefix_only`` False), and
    validation decodes its exact match instead (``SequenceModel.one_pass_exact``)."""
    net = decoder("rope", scaling="dynamic_ntk", scaling_factor=4.0, original_max_len=4)
    assert not net.prefix_only and not net.pe.prefix_only
    tokens = torch.randint(3, VOCAB, (4, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        whole, prefix = net(tokens, positions("rope", 4, 12, False)), net(tokens[:, :8])
    assert not torch.allclose(whole[:, :8], prefix, atol=1e-3)
    plain = decoder("rope")
    with torch.no_grad():  # without the scaling the prefix's outputs are the whole's
        torch.testing.assert_close(plain(tokens)[:, :8], plain(tokens[:, :8]))
    assert encoder("rope").prefix_only
