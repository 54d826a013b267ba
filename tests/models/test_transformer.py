import dataclasses
from functools import partial

import pytest
import torch
from hydra.utils import get_class

from pelab.errors import ConfigError
from pelab.models.dims import NetDims
from pelab.models.encoder_decoder import EncoderDecoder
from pelab.models.form import Form
from pelab.models.transformer import Transformer
from pelab.pe import PE_REGISTRY, ModelDims, NoPE
from tests.conftest import compose_config


def build(name: str = "rope", **sizes) -> Transformer:
    net = NetDims(**{**dict(vocab_size=10, max_len=32, d_model=16, n_heads=2), **sizes})
    return Transformer(net, partial(PE_REGISTRY[name]), causal=True)


def test_logits_have_one_row_per_token_and_one_column_per_symbol():
    assert build()(torch.zeros(3, 7, dtype=torch.long)).shape == (3, 7, 10)


def test_default_positions_are_zero_to_n_minus_one():
    net = build("sinusoidal")
    tokens = torch.randint(0, 10, (2, 5))
    assert torch.equal(net(tokens), net(tokens, torch.arange(5)))


def test_parameter_counts_separate_the_encoding_and_count_shared_tables_once():
    net = build("learned", max_len=32)
    counts = net.num_params()
    assert counts["pe"] == 32 * 16
    assert counts["total"] == sum(p.numel() for p in net.parameters())
    assert build("rope").num_params()["pe"] == 0


def test_heads_must_divide_the_model_dimension():
    with pytest.raises(
        ConfigError, match=r"model.net.d_model=10 is not divisible by model.net.n_heads=4"
    ):
        build(d_model=10, n_heads=4)


def test_both_networks_take_one_netdims_read_off_model_nets_flat_keys(tmp_path):
    """``model.net`` keeps its flat keys (records and resumed runs compare them key by key):
    each is a field of ``NetDims``, which both networks are built from."""
    fields = {f.name for f in dataclasses.fields(NetDims)}
    for model in ("decoder", "encoder", "encoder_bare", "encoder_decoder", "encoder_rpe"):
        net = compose_config([f"model={model}"], tmp_path).model.net
        assert set(net) - {"_target_"} <= fields, model
        assert get_class(net._target_).configured_by is NetDims


def test_netdims_completes_its_options_and_gives_each_stack_its_encodings_dims():
    dims = NetDims(vocab_size=10, max_len=32, d_model=16, n_heads=2, form={"norm": "post"})
    assert dims.d_ff == 64 and dims.form == Form(norm="post") and dims.digit_tokens == ()
    assert dims.encoding(False) == ModelDims(16, 2, 2, False, 32, 10, 1, 0, ())
    net = EncoderDecoder(dims, NoPE)
    assert net.encoder.pe.dims == dims.encoding(False)
    assert net.decoder.pe.dims == net.dims == dims.encoding(True)
    assert build().dims == NetDims(vocab_size=10, max_len=32, d_model=16, n_heads=2).encoding(True)


BLOCK = ["norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias", "attn.qkv.weight"]
BLOCK += ["attn.proj.weight", "mlp.net.0.weight", "mlp.net.0.bias", "mlp.net.2.weight"]
BLOCK += ["mlp.net.2.bias"]
CROSS = ["norm_cross.weight", "norm_cross.bias", "cross.qkv.weight", "cross.proj.weight"]


def test_the_weights_keep_the_names_their_checkpoints_hold():
    """A checkpoint's ``state_dict`` loads by these names (trained runs resume and reload)."""
    dims = NetDims(vocab_size=10, max_len=32, d_model=16, n_heads=2, n_layers=1)
    decoder = Transformer(dims, PE_REGISTRY["t5_bias"], causal=True)
    blocks = [f"blocks.0.{name}" for name in BLOCK]
    assert list(decoder.state_dict()) == [
        "pe.bias.weight", "tok_emb.weight", *blocks, "norm.weight", "norm.bias", "head.weight"
    ]  # fmt: skip

    def stack(side: str, cross: list[str]) -> list[str]:
        blocks = [f"{side}.blocks.0.{name}" for name in BLOCK + cross]
        return [f"{side}.pe.bias.weight", *blocks, f"{side}.norm.weight", f"{side}.norm.bias"]

    both = EncoderDecoder(dims, PE_REGISTRY["t5_bias"])
    expected = ["tok_emb.weight", *stack("encoder", []), *stack("decoder", CROSS), "head.weight"]
    assert list(both.state_dict()) == expected
