"""Properties every registered encoding must have, checked through the whole model."""

from functools import partial

import pytest
import torch

from pelab.errors import ConfigError
from pelab.models.transformer import Transformer
from pelab.pe import PE_REGISTRY
from pelab.pe.base import SHIFT_CLASSES
from tests.pe.nets import sharp_net

ALL = sorted(n for n, c in PE_REGISTRY.items() if c.position_dims != 2)  # 2-D: test_contract_2d
BIDIRECTIONAL = [name for name in ALL if not PE_REGISTRY[name].causal_only]


def with_model_kinds(names: list[str]) -> list[tuple[str, bool]]:
    """(name, causal) pairs: decoders for all, encoders for those defined bidirectionally."""
    return [(n, causal) for n in names for causal in (True, False) if causal or n in BIDIRECTIONAL]


def shift_class(shift: str) -> list[str]:
    """The encodings that declare ``shift`` (``PositionalEncoding.shift``)."""
    return [name for name in ALL if PE_REGISTRY[name].shift == shift]


# use only differences of positions (xpos: q and k are scaled by zeta^(+-(p - c)/gamma), which a
# shift changes, but the scales meet in every score as zeta^((n - m)/gamma): invariant up to float
# rounding, ~1e-6 here)
RELATIVE = shift_class("relative")
ABSOLUTE = shift_class("absolute")
# relative only while every position stays below a learned threshold L, which normalises by the
# query position beyond it: both regimes are tested in test_fire.py
RELATIVE_BELOW_A_THRESHOLD = shift_class("relative_below_threshold")


def make_net(name: str, causal: bool = True, impl: str = "auto", max_len: int = 64) -> Transformer:
    return sharp_net(partial(PE_REGISTRY[name]), causal, max_len=max_len, impl=impl)


def test_every_encoding_declares_a_valid_shift_class():
    invalid = {n: PE_REGISTRY[n].shift for n in ALL if PE_REGISTRY[n].shift not in SHIFT_CLASSES}
    assert not invalid, f"shift classes must be one of {SHIFT_CLASSES}: {invalid}"
    classes = RELATIVE + ABSOLUTE + RELATIVE_BELOW_A_THRESHOLD
    twice = sorted({name for name in classes if classes.count(name) > 1})
    assert not twice, f"in more than one shift class: {twice}"
    assert sorted(classes) == ALL, (
        f"unclassified: {sorted(set(ALL) - set(classes))}, "
        f"not registered: {sorted(set(classes) - set(ALL))}"
    )


@pytest.mark.parametrize("name", ALL)
def test_decoder_output_at_t_never_depends_on_later_tokens(name):
    net = make_net(name)
    tokens = torch.randint(0, 12, (2, 10))
    changed = tokens.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % 12
    a, b = net(tokens), net(changed)
    assert torch.allclose(a[:, :6], b[:, :6], atol=1e-5)
    assert not torch.allclose(a[:, 6:], b[:, 6:], atol=1e-3)


@pytest.mark.parametrize(("name", "causal"), with_model_kinds(RELATIVE))
def test_relative_encodings_are_invariant_to_shifting_all_positions(name, causal):
    net = make_net(name, causal=causal)
    tokens = torch.randint(0, 12, (2, 9))
    base = torch.arange(9)
    assert torch.allclose(net(tokens, base), net(tokens, base + 13), atol=1e-4)


@pytest.mark.parametrize(("name", "causal"), with_model_kinds(RELATIVE_BELOW_A_THRESHOLD))
def test_threshold_encodings_are_invariant_to_a_shift_that_stays_below_the_default_threshold(
    name, causal
):
    net = make_net(name, causal=causal)
    tokens = torch.randint(0, 12, (2, 9))
    base = torch.arange(9)
    assert torch.allclose(net(tokens, base), net(tokens, base + 13), atol=1e-4)


@pytest.mark.parametrize("name", ABSOLUTE)
def test_absolute_encodings_see_the_shift(name):
    net = make_net(name)
    tokens = torch.randint(0, 12, (2, 9))
    base = torch.arange(9)
    assert not torch.allclose(net(tokens, base), net(tokens, base + 13), atol=1e-3)


def test_encoder_without_positions_is_permutation_equivariant():
    # "cat chases mouse" vs "mouse chases cat": the same outputs, permuted
    net = make_net("none", causal=False)
    tokens = torch.tensor([[3, 4, 5]])
    perm = torch.tensor([2, 1, 0])
    assert torch.allclose(net(tokens)[:, perm], net(tokens[:, perm]), atol=1e-5)


@pytest.mark.parametrize("name", [n for n in BIDIRECTIONAL if n != "none"])
def test_every_other_encoding_breaks_permutation_equivariance(name):
    net = make_net(name, causal=False)
    tokens = torch.tensor([[3, 4, 5, 6]])
    perm = torch.tensor([3, 1, 0, 2])
    assert not torch.allclose(net(tokens)[:, perm], net(tokens[:, perm]), atol=1e-4)


@pytest.mark.parametrize(
    ("name", "causal"),
    with_model_kinds([n for n in ALL if not PE_REGISTRY[n].needs_eager_attention()]),
)
def test_fused_attention_computes_the_same_function_as_eager(name, causal):
    tokens = torch.randint(0, 12, (3, 11))
    eager = make_net(name, causal, impl="eager")(tokens)
    fused = make_net(name, causal, impl="fused")(tokens)
    assert torch.allclose(eager, fused, atol=1e-5)


@pytest.mark.parametrize("name", ALL)
def test_gradients_reach_every_parameter_of_the_encoding(name):
    net = make_net(name).train()
    net(torch.randint(0, 12, (2, 8))).sum().backward()
    for pname, p in net.pe.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname


@pytest.mark.parametrize("name", ALL)
def test_runs_beyond_training_lengths_or_refuses_clearly(name):
    # every encoding here is defined at any position inside the run's max_len, including ones
    # never trained; only the learned table has a hard limit (tested in test_absolute.py)
    net = make_net(name, max_len=64)
    out = net(torch.randint(0, 12, (1, 64)))
    assert out.shape == (1, 64, 12) and torch.isfinite(out).all()


@pytest.mark.parametrize("name", [n for n in ALL if PE_REGISTRY[n].causal_only])
def test_causal_only_encodings_refuse_an_encoder(name):
    with pytest.raises(ConfigError, match="causal"):
        make_net(name, causal=False)
