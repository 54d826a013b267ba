from functools import partial

import pytest
import torch

from pelab.errors import ConfigError
from pelab.models.transformer import Transformer
from pelab.pe.base import ModelDims, NoPE
from pelab.pe.bias import T5BiasPE, t5_bucket
from pelab.pe.composed import ComposedPE
from pelab.pe.urpe import ToeplitzScaling, UniversalRelativePE
from pelab.positions import Positions
from tests.pe.nets import sharp_net


def make_net(pe, causal: bool) -> Transformer:
    return sharp_net(pe, causal, max_len=16)


def scaling(pe: UniversalRelativePE) -> ToeplitzScaling:
    """The part that holds ``c`` and multiplies ``C`` into the probabilities."""
    return pe.parts["toeplitz"]


def toeplitz_matrix(pe: UniversalRelativePE, positions: torch.Tensor, layer: int) -> torch.Tensor:
    """The matrix C the encoding multiplies into attention, ``[b, h, i, j]``."""
    n = positions.shape[-1]
    ones = torch.ones(positions.shape[0], pe.dims.n_heads, n, n)
    return pe.modify_probs(ones, Positions.from_tensor(positions), layer)


def random_toeplitz(pe: UniversalRelativePE) -> UniversalRelativePE:
    torch.manual_seed(3)
    torch.nn.init.normal_(scaling(pe).c)
    return pe


@pytest.mark.parametrize("causal", [True, False])
def test_c_depends_only_on_the_offset_i_minus_j(causal):
    pe = random_toeplitz(UniversalRelativePE(ModelDims(8, 2, 2, causal, 6), bias="none"))
    c = toeplitz_matrix(pe, torch.arange(6)[None], layer=1)[0]
    assert torch.equal(c[:, 1:, 1:], c[:, :-1, :-1])  # constant along every diagonal
    for i in range(6):
        for j in range(6 if not causal else i + 1):
            assert torch.equal(c[:, i, j], scaling(pe).c[1, :, scaling(pe).behind + j - i])
    assert not torch.equal(c[0], c[1])  # one table per head
    assert not torch.equal(toeplitz_matrix(pe, torch.arange(6)[None], 0), c[None])  # per layer


def test_encoder_learns_both_directions_separately():
    pe = random_toeplitz(UniversalRelativePE(ModelDims(8, 2, 1, False, 6), bias="none"))
    c = toeplitz_matrix(pe, torch.arange(4)[None], 0)[0, 0]
    assert c[2, 0] == scaling(pe).c[0, 0, 5 - 2] and c[0, 2] == scaling(pe).c[0, 0, 5 + 2]
    assert c[2, 0] != c[0, 2]


def test_offsets_beyond_max_len_reuse_the_last_entry():
    pe = random_toeplitz(UniversalRelativePE(ModelDims(8, 2, 1, False, 4), bias="none"))
    c = toeplitz_matrix(pe, torch.tensor([[0, 3, 10]]), 0)[0]  # offsets up to 10 > max_len - 1
    assert torch.equal(c[:, 2, 0], scaling(pe).c[0, :, 0]) and torch.equal(c[:, 2, 1], c[:, 2, 0])
    assert torch.equal(c[:, 0, 2], scaling(pe).c[0, :, -1])


def test_a_fixed_max_len_sizes_the_table_for_any_run_length():
    # a run of 12 tokens with a table pinned to max_len=4 (e.g. a checkpoint trained on 4)
    pe = random_toeplitz(UniversalRelativePE(ModelDims(8, 2, 1, True, 12), "none", max_len=4))
    assert scaling(pe).c.shape == (1, 2, 4)
    c = toeplitz_matrix(pe, torch.arange(12)[None], 0)[0]
    assert torch.equal(c[:, 11, 11], scaling(pe).c[0, :, -1])  # offset 0
    assert torch.equal(c[:, 11, 8], scaling(pe).c[0, :, 0])  # offset 3 = max_len - 1
    assert torch.equal(c[:, 11, 0], scaling(pe).c[0, :, 0])  # offset 11 reuses it
    with pytest.raises(ConfigError, match=r"pe.max_len must be >= 1 .*got 0"):
        UniversalRelativePE(ModelDims(8, 2, 1, True, 12), max_len=0)


def test_probabilities_are_multiplied_without_renormalising():
    pe = UniversalRelativePE(ModelDims(2, 1, 1, True, 3), bias="none")
    with torch.no_grad():
        scaling(pe).c.copy_(torch.tensor([[[3.0, 2.0, 0.5]]]))  # c_2, c_1, c_0
    probs = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]).expand(1, 1, 3, 3)
    expected = torch.tensor([[0.5, 0.0, 0.0], [1.0, 0.25, 0.0], [0.6, 0.6, 0.25]])
    assert torch.allclose(pe.modify_probs(probs, Positions.contiguous(3), 0)[0, 0], expected)


def test_starts_as_its_base_model_with_c_equal_to_one():
    pe = UniversalRelativePE(ModelDims(16, 2, 2, True, 16))
    assert torch.equal(scaling(pe).c, torch.ones(2, 2, 16))
    assert torch.equal(
        pe.parts["bias"].bias.weight, torch.zeros(32, 2)
    )  # T5's bias starts at zero too


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("bias", "base"), [("t5", T5BiasPE), ("none", NoPE)])
def test_with_c_equal_to_one_urpe_is_exactly_its_base_model(causal, bias, base):
    urpe = make_net(partial(UniversalRelativePE, bias=bias), causal)
    with torch.no_grad():
        scaling(urpe.pe).c.fill_(1.0)
    plain = make_net(base, causal)
    weights = {name.replace("pe.parts.bias.", "pe."): w for name, w in urpe.state_dict().items()}
    del weights["pe.parts.toeplitz.c"]
    plain.load_state_dict(weights)
    tokens = torch.randint(0, 12, (2, 10))
    assert torch.allclose(urpe(tokens), plain(tokens), atol=1e-5)
    with torch.no_grad():
        scaling(urpe.pe).c.normal_()
    assert not torch.allclose(urpe(tokens), plain(tokens), atol=1e-3)


def test_t5_bias_is_the_t5_bias_of_the_relative_offsets():
    pe = UniversalRelativePE(ModelDims(8, 2, 1, False, 8), bias="t5", num_buckets=8)
    with torch.no_grad():
        pe.parts["bias"].bias.weight.copy_(torch.arange(16.0).view(8, 2))
    bias = pe.logit_bias(Positions.contiguous(3), 0)[0]
    buckets = t5_bucket(torch.arange(3)[None, :] - torch.arange(3)[:, None], True, 8, 128)
    assert torch.equal(bias[1], pe.parts["bias"].bias.weight[buckets, 1])
    assert (
        UniversalRelativePE(ModelDims(8, 2, 1, False, 8), bias="none").logit_bias(
            Positions.contiguous(3), 0
        )
        is None
    )


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("bias", ["t5", "none"])
def test_model_outputs_are_invariant_to_shifting_all_positions(causal, bias):
    net = make_net(partial(UniversalRelativePE, bias=bias), causal)
    tokens = torch.randint(0, 12, (2, 9))
    base = torch.arange(9)
    assert torch.allclose(net(tokens, base), net(tokens, base + 13), atol=1e-4)
    assert not torch.allclose(net(tokens, base), net(tokens, base * 2), atol=1e-3)


def test_parameter_counts():
    encoder = UniversalRelativePE(ModelDims(16, 4, 3, False, 10), bias="none")
    assert sum(p.numel() for p in encoder.parameters()) == 3 * 4 * (2 * 10 - 1)
    decoder = UniversalRelativePE(ModelDims(16, 4, 3, True, 10), num_buckets=16)
    assert sum(p.numel() for p in decoder.parameters()) == 3 * 4 * 10 + 16 * 4


def test_unknown_bias_names_the_valid_choices():
    with pytest.raises(
        ConfigError, match="pe.bias='shaw' is not a choice; valid choices: none, t5"
    ):
        UniversalRelativePE(ModelDims(8, 2, 1, True, 8), bias="shaw")


def test_bad_t5_settings_are_refused_as_urpe_settings():
    with pytest.raises(ConfigError, match=r"pe=urpe \(part 'bias'\): pe=t5_bias .*num_buckets=2"):
        UniversalRelativePE(ModelDims(8, 2, 1, False, 8), num_buckets=2)


@pytest.mark.parametrize(("bias", "parts"), [("t5", ["toeplitz", "bias"]), ("none", ["toeplitz"])])
def test_urpe_is_the_composition_of_its_bias_and_the_toeplitz_scaling(bias, parts):
    pe = UniversalRelativePE(ModelDims(8, 2, 2, True, 8), bias=bias)
    assert isinstance(pe, ComposedPE) and list(pe.parts) == parts
    assert isinstance(pe.parts["toeplitz"], ToeplitzScaling)
    assert bias == "none" or type(pe.parts["bias"]) is T5BiasPE
    # no hook of its own: every one is the composition's
    assert not {"logit_bias", "modify_probs"} & set(vars(UniversalRelativePE))
    assert pe.needs_eager_attention() and UniversalRelativePE.needs_eager_attention()
    assert pe.shift == UniversalRelativePE.shift == "relative"
    assert pe.position_dims == 1 and pe.supports_kv_cache and not pe.causal_only
