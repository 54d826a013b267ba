"""``model.net.form``: pelab's network and the RPE code's (Ruoss et al. 2023,
google-deepmind/randomized_positional_encodings, ``models/transformer.py``), checked against
that code's equations written out here."""

import math

import pytest
import torch
import torch.nn.functional as F

from pelab.assembly import build_model, build_task
from pelab.errors import ConfigError
from pelab.models.dims import NetDims
from pelab.models.encoder_decoder import EncoderDecoder
from pelab.models.form import Form
from pelab.models.transformer import Transformer
from pelab.pe.absolute import SinusoidalPE, sinusoid_table
from pelab.pe.base import NoPE
from pelab.pe.rotary import RotaryPE
from pelab.positions import Positions, RandomizedPositions

RPE = dict(
    norm="post",
    final_norm=False,
    activation="relu",
    head_bias=True,
    init="haiku",
    embedding="rpe",
    attention_dropout=False,
)


def rpe_encoder(
    net: Transformer, tokens: torch.Tensor, positions: torch.Tensor | None = None
) -> torch.Tensor:
    """The RPE code's ``TransformerEncoder`` then ``hk.Linear(output_size)``, without dropout, on
    ``net``'s weights: ``h = sqrt(d) E[x]`` (plus sin/cos at ``positions``, concatenated layout,
    as ``add_positional_encodings``; without them RoPE on q and k, ``rpe_rotary``); per layer
    ``a = LN(h + attn(h))``, ``h = LN(a + W2 relu(W1 a + b1) + b2)``; logits ``h W + b``."""
    d, heads = net.dims.d_model, net.dims.n_heads
    h = math.sqrt(d) * net.tok_emb.weight[0][tokens]
    if positions is not None:
        h = h + sinusoid_table(positions, d, layout="concat")

    def linear(layer, x):
        return x @ layer.weight[0].T + (0 if layer.bias is None else layer.bias[0])

    def layer_norm(norm, x):
        return F.layer_norm(x, (d,), norm.weight[0], norm.bias[0], 1e-5)

    for block in net.blocks:
        q, k, v = (
            t.unflatten(-1, (heads, d // heads)) for t in linear(block.attn.qkv, h).split(d, -1)
        )
        if positions is None:
            q, k = rpe_rotary(q), rpe_rotary(k)
        logits = torch.einsum("bthd,bThd->bhtT", q, k) / math.sqrt(d // heads)
        out = torch.einsum("bhtT,bThd->bthd", logits.softmax(-1), v).flatten(2)
        a = layer_norm(block.norm1, h + linear(block.attn.proj, out))
        hidden = torch.relu(linear(block.mlp.net[0], a))
        h = layer_norm(block.norm2, linear(block.mlp.net[2], hidden) + a)
    return linear(net.head, h)


def rpe_rotary(x: torch.Tensor) -> torch.Tensor:
    """The RPE code's ``apply_rotary_encoding`` at positions ``0..t-1``: ``x: [b, t, h, d]``,
    frequencies ``10000^(-2k/d)`` repeated per pair, ``x cos + x_rot sin`` with
    ``x_rot = (-x_1, x_0, -x_3, x_2, ...)``."""
    half = x.shape[-1] // 2
    inv_freq = (10000.0 ** (-torch.arange(half) / half)).repeat_interleave(2)
    angles = torch.arange(x.shape[1])[None, :, None, None] * inv_freq
    rotated = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    return x * angles.cos() + rotated * angles.sin()


SMALL = dict(vocab_size=10, max_len=20, d_model=16, n_heads=2)


def encoder(pe, vocab_size: int = 12, max_len: int = 40, **sizes) -> Transformer:
    """A bidirectional Transformer of ``pe`` (``sizes``: ``NetDims``'s)."""
    return Transformer(NetDims(vocab_size=vocab_size, max_len=max_len, **sizes), pe, causal=False)


def sinusoidal(dims):
    return SinusoidalPE(dims, layout="concat")


def test_the_rpe_form_computes_the_rpe_codes_encoder():
    torch.manual_seed(0)
    net = encoder(sinusoidal, d_model=32, n_heads=4, n_layers=3, form=RPE)
    for p in net.parameters():  # every weight away from its start, biases and gains included
        p.data += 0.1 * torch.randn_like(p)
    tokens = torch.randint(0, 12, (3, 9))
    positions = torch.tensor([[0, 3, 4, 9, 11, 20, 21, 30, 39]])
    expected = rpe_encoder(net, tokens, positions)
    torch.testing.assert_close(net.eval()(tokens, positions), expected, rtol=1e-5, atol=1e-5)
    pre = encoder(sinusoidal, d_model=32, n_heads=4, n_layers=3)
    pre.load_state_dict(net.state_dict(), strict=False)  # pelab's form on the same weights
    assert not torch.allclose(pre.eval()(tokens, positions), expected, atol=1e-2)


def test_the_rpe_form_has_the_rpe_codes_parameters_and_start():
    torch.manual_seed(0)
    net = encoder(NoPE, vocab_size=10, d_model=64, n_heads=8, n_layers=2, form=RPE)
    params = dict(net.named_parameters())
    assert "head.bias" in params and not any(k.startswith("norm.") for k in params)
    for name, p in params.items():
        if name == "tok_emb.weight":  # truncated N(0, 0.02^2): spread 0.88 x 0.02
            bound, spread = 0.04, 0.0176
        elif p.dim() == 3:  # hk.Linear: truncated N(0, 1/fan_in)
            bound, spread = 2 * p.shape[-1] ** -0.5, 0.88 * p.shape[-1] ** -0.5
        else:
            expected = 1.0 if name.endswith("norm1.weight") or name.endswith("norm2.weight") else 0
            assert (p == expected).all(), name  # biases 0, LayerNorm gains 1
            continue
        assert p.abs().max() <= bound + 1e-7, name
        assert abs(p.std().item() - spread) < 0.15 * spread, name
    assert isinstance(net.blocks[0].mlp.net[1], torch.nn.ReLU)
    default = encoder(NoPE, vocab_size=10, d_model=64, n_heads=8, n_layers=2)
    assert "head.bias" not in dict(default.named_parameters())
    assert isinstance(default.blocks[0].mlp.net[1], torch.nn.GELU)
    assert abs(default.tok_emb.weight.std().item() - 1.0) < 0.05  # pelab's N(0, 1) table


def test_the_rpe_embedding_scales_tokens_and_drops_out_only_an_added_encoding():
    def net(pe, **form):
        form = dict(embedding="rpe", **form)
        return encoder(
            pe, vocab_size=10, d_model=16, n_heads=2, n_layers=1, dropout=0.5, form=form
        )

    assert net(sinusoidal).drop_embedded.p == 0.5
    assert net(sinusoidal).blocks[0].attn.dropout == 0.5  # pelab's: on the probabilities too
    assert net(sinusoidal, attention_dropout=False).blocks[0].attn.dropout == 0.0  # the RPE code
    assert (
        net(RotaryPE).drop_embedded.p == 0.0
    )  # the RPE code adds nothing there, so drops nothing
    assert net(RotaryPE).token_factor == 4.0
    table = encoder(RotaryPE, vocab_size=10, d_model=16, n_heads=2, n_layers=1, dropout=0.5)
    assert table.token_factor == 1.0 and table.drop_embedded.p == 0.0


def test_a_bad_form_is_refused_naming_the_key_and_its_choices():
    with pytest.raises(
        ConfigError, match="form.norm='middle' is not a choice; valid choices: pre, "
    ):
        Form.of({"norm": "middle"})
    with pytest.raises(ConfigError, match="form.final_norm='no'"):
        Form.of({"final_norm": "no"})
    with pytest.raises(ConfigError, match="no key 'bias'; valid keys"):
        Form.of({"bias": True})
    scaled = lambda dims: SinusoidalPE(dims, token_scale="sqrt_d_model")  # noqa: E731
    with pytest.raises(ConfigError, match="pe.token_scale=sqrt_d_model would do it twice"):
        encoder(scaled, vocab_size=10, d_model=16, n_heads=2, form={"embedding": "rpe"})


def test_the_encoder_decoder_takes_the_form_too():
    torch.manual_seed(0)
    net = EncoderDecoder(NetDims(**SMALL, n_layers=1, form=RPE), NoPE)
    params = dict(net.named_parameters())
    assert "head.bias" in params and not any(".norm." in k for k in params)
    assert net.decoder.blocks[0].post_norm and net.token_factor == 4.0
    assert net(torch.randint(0, 10, (2, 5)), torch.randint(0, 10, (2, 3))).shape == (2, 3, 10)
    with pytest.raises(ConfigError, match="positions.layers=shared"):
        EncoderDecoder(NetDims(**SMALL), NoPE, layered_positions=True)


def test_each_layer_reads_its_own_draw_of_positions():
    torch.manual_seed(0)
    dims = NetDims(vocab_size=10, max_len=64, d_model=16, n_heads=2, n_layers=3)
    net = Transformer(dims, sinusoidal, causal=False, layered_positions=True)
    draws = RandomizedPositions(64, per="batch", layers="each").for_layers(3)
    positions = draws(4, 3, 3, torch.Generator().manual_seed(0))  # [1, 8, 4]
    assert positions.shape == (1, 8, 4)
    seen = []
    net.pe.embed = lambda x, tokens, pos: seen.append(pos.q) or x
    for block in net.blocks:
        block.register_forward_pre_hook(lambda _m, args: seen.append(args[1].q))
    out = net(torch.randint(0, 10, (4, 8)), positions)
    assert out.shape == (4, 8, 10)
    for i, q in enumerate(seen):
        assert torch.equal(q, positions[..., i])
    assert len({tuple(q.flatten().tolist()) for q in seen}) == 4  # four different draws
    with pytest.raises(ConfigError, match=r"reads positions \[b, n, 4\]"):
        net(torch.randint(0, 10, (4, 8)), positions[..., :2])
    with pytest.raises(ConfigError, match="a decoder draws them once"):
        dims = NetDims(vocab_size=10, max_len=64, d_model=16, n_heads=2)
        Transformer(dims, NoPE, causal=True, layered_positions=True)
    assert Positions.of(None, 3, layered=True).layered is False  # contiguous: one draw for all


def test_the_rpe_preset_trains_a_stack_with_positions_per_batch_and_layer(tiny_cfg):
    cfg = tiny_cfg(
        "model=encoder_rpe",
        "pe=rope",
        "positions=randomized",
        "positions.max_position=128",
        "positions.per=batch",
        "positions.layers=each",
        "model.net.n_layers=2",
        "seeds=[0,1]",
    )
    model = build_model(cfg, build_task(cfg))
    assert model.positions.draws == 3 and model.net.layered_positions
    prompt = torch.randint(3, 10, (4, 5))
    positions = model.training_positions(prompt, 5, step=0)
    assert positions.shape == (1, 12, 3)  # one draw for the batch, one per layer and embedding
    model.log = lambda *a, **k: None
    loss = model.training_step(((prompt, prompt), (prompt, prompt)), 0)
    assert torch.isfinite(loss)
    model._evaluate("val", {"prompt": prompt, "answer": prompt}, 0, 0)


def test_the_rpe_form_with_rope_computes_the_rpe_codes_rotary_encoder():
    torch.manual_seed(1)
    net = encoder(RotaryPE, d_model=32, n_heads=4, n_layers=2, form=RPE)
    for p in net.parameters():
        p.data += 0.1 * torch.randn_like(p)
    tokens = torch.randint(0, 12, (3, 9))
    torch.testing.assert_close(net.eval()(tokens), rpe_encoder(net, tokens), rtol=1e-5, atol=1e-5)
