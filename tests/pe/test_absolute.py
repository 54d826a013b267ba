import math
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from pelab.errors import ConfigError
from pelab.pe import PE_REGISTRY
from pelab.pe.absolute import AdditivePE, LearnedPE, SinusoidalPE, sinusoid_table
from pelab.pe.base import ModelDims
from pelab.positions import Positions
from tests.conftest import CONFIG_DIR

DIMS = ModelDims(d_model=4, n_heads=1, n_layers=1, causal=True, max_len=16)


def test_sinusoid_matches_the_paper_formula_at_hand_computed_points():
    # dim 4, base 10000: frequencies 1 and 10000^(-2/4) = 0.01
    interleaved = sinusoid_table(torch.tensor([0, 1, 3]), 4)
    assert torch.allclose(interleaved[0], torch.tensor([0.0, 1.0, 0.0, 1.0]))
    expected = torch.tensor([math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)])
    assert torch.allclose(interleaved[1], expected)
    expected3 = torch.tensor([math.sin(3), math.cos(3), math.sin(0.03), math.cos(0.03)])
    assert torch.allclose(interleaved[2], expected3)


def test_concat_layout_puts_all_sines_before_all_cosines():
    concat = sinusoid_table(torch.tensor([1]), 4, layout="concat")[0]
    expected = torch.tensor([math.sin(1), math.sin(0.01), math.cos(1), math.cos(0.01)])
    assert torch.allclose(concat, expected)


def test_sinusoid_base_is_configurable():
    row = sinusoid_table(torch.tensor([2]), 4, base=100.0)[0]  # frequencies 1 and 0.1
    assert torch.allclose(
        row, torch.tensor([math.sin(2), math.cos(2), math.sin(0.2), math.cos(0.2)])
    )


def test_shifted_sinusoid_is_a_fixed_linear_map_of_the_original():
    # PE(p + k) = PE(p) M_k, with M_k block-diagonal rotations by k * omega_i (Vaswani et al.'s
    # motivation: relative offsets are linear functions of absolute encodings)
    dim, k = 8, 5
    omega = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    m = torch.zeros(dim, dim, dtype=torch.float64)
    for i, w in enumerate(omega):
        c, s = math.cos(k * w), math.sin(k * w)
        m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, -s], [s, c]])
    pos = torch.arange(0, 200)
    table = sinusoid_table(pos, dim).double()
    assert torch.allclose(table @ m, sinusoid_table(pos + k, dim).double(), atol=1e-4)


def test_sinusoidal_pe_adds_the_table_to_the_embeddings():
    pe = SinusoidalPE(DIMS)
    x = torch.randn(2, 3, 4)
    out = pe.embed(x, torch.zeros(2, 3, dtype=torch.long), Positions.contiguous(3))
    assert torch.allclose(out - x, sinusoid_table(torch.arange(3), 4).expand(2, 3, 4))


def test_sinusoidal_rejects_an_odd_model_dimension_with_a_clear_message():
    with pytest.raises(ConfigError, match=r"pe=sinusoidal needs an even model.net.d_model, got 5"):
        SinusoidalPE(ModelDims(5, 1, 1, True, 8))


def test_unknown_sinusoid_layout_names_the_valid_choices():
    with pytest.raises(ConfigError, match="interleaved"):
        SinusoidalPE(DIMS, layout="zigzag")


def test_learned_table_is_sized_to_the_run_and_counted_once():
    pe = LearnedPE(DIMS)
    assert pe.table.weight.shape == (16, 4)
    assert sum(p.numel() for p in pe.parameters()) == 16 * 4


def test_learned_table_shorter_than_the_run_is_refused_before_training():
    with pytest.raises(ConfigError, match=r"cannot\s+extrapolate.*pe.max_len to at least 16"):
        LearnedPE(DIMS, max_len=8)


def test_learned_table_refuses_positions_beyond_its_size():
    pe = LearnedPE(DIMS)
    x = torch.zeros(1, 2, 4)
    with pytest.raises(ConfigError, match="position 20"):
        pe.embed(
            x, torch.zeros(1, 2, dtype=torch.long), Positions.from_tensor(torch.tensor([0, 20]))
        )


def test_learned_embedding_is_the_table_row_of_each_position():
    pe = LearnedPE(DIMS)
    x = torch.zeros(1, 3, 4)
    out = pe.embed(
        x, torch.zeros(1, 3, dtype=torch.long), Positions.from_tensor(torch.tensor([4, 0, 9]))
    )
    assert torch.equal(out[0], pe.table.weight[[4, 0, 9]])


ADDITIVE = sorted(n for n, c in PE_REGISTRY.items() if issubclass(c, AdditivePE))


def test_every_additive_encoding_offers_both_knobs_in_its_config():
    assert {"sinusoidal", "learned", "scaled_sinusoidal", "hierarchical"} <= set(ADDITIVE)
    for name in ADDITIVE:
        config = OmegaConf.load(Path(CONFIG_DIR) / "pe" / f"{name}.yaml")
        assert (config.token_scale, config.join) == ("none", "add"), name


def test_sqrt_d_model_scales_the_tokens_not_the_positions():
    dims = ModelDims(d_model=16, n_heads=1, n_layers=1, causal=True, max_len=16)
    pe = SinusoidalPE(dims, token_scale="sqrt_d_model")
    x, pos = torch.randn(2, 5, 16), Positions.contiguous(5)
    expected = 4.0 * x + sinusoid_table(torch.arange(5), 16)
    torch.testing.assert_close(pe.embed(x, torch.zeros(2, 5).long(), pos), expected)


def test_concat_projects_the_scaled_tokens_and_the_positions():
    pe = SinusoidalPE(DIMS, token_scale="sqrt_d_model", join="concat")
    x, pos = torch.randn(2, 3, 4), Positions.contiguous(3)
    joined = torch.cat((2.0 * x, sinusoid_table(torch.arange(3), 4).expand(2, 3, 4)), dim=-1)
    expected = joined @ pe.joiner.weight.T
    torch.testing.assert_close(pe.embed(x, torch.zeros(2, 3).long(), pos), expected)


def test_concatenating_a_learned_table_is_adding_one_reparametrised():
    """``W [x ; E[p]] = W_x x + W_p E[p]``: adding the table ``W_p E`` to the tokens ``W_x x``."""
    concat = LearnedPE(DIMS, join="concat")
    added = LearnedPE(DIMS)
    w_x, w_p = concat.joiner.weight.split(4, dim=1)
    with torch.no_grad():
        added.table.weight.copy_(concat.table.weight @ w_p.T)
    x, pos = torch.randn(2, 6, 4), Positions.contiguous(6)
    tokens = torch.zeros(2, 6).long()
    torch.testing.assert_close(concat.embed(x, tokens, pos), added.embed(x @ w_x.T, tokens, pos))


def test_concat_can_keep_a_fixed_sinusoid_in_its_own_subspace():
    dims = ModelDims(d_model=8, n_heads=1, n_layers=1, causal=True, max_len=16)
    pe = SinusoidalPE(dims, join="concat")
    keep_first, keep_second = torch.diag(torch.tensor([1.0] * 4 + [0.0] * 4)), torch.zeros(8, 8)
    keep_second[4:, :4] = torch.eye(4)  # the sinusoid's first 4 dims into dims 4..7
    with torch.no_grad():
        pe.joiner.weight.copy_(torch.cat((keep_first, keep_second), dim=1))
    x, pos, tokens = torch.randn(1, 6, 8), Positions.contiguous(6), torch.zeros(1, 6).long()
    out = pe.embed(x, tokens, pos)
    torch.testing.assert_close(out[..., :4], x[..., :4])  # tokens alone
    torch.testing.assert_close(out[..., 4:], sinusoid_table(torch.arange(6), 8)[None, :, :4])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"token_scale": "sqrt"}, "pe.token_scale='sqrt' is not a choice; .*: none, sqrt_d_model"),
        ({"join": "sum"}, "pe.join='sum' is not a choice; valid choices: add, concat"),
        ({"layout": "spiral"}, "pe.layout='spiral' is not a choice; .*: interleaved, concat"),
    ],
)
def test_bad_knobs_are_refused_with_the_choices(options, message):
    with pytest.raises(ConfigError, match=message):
        SinusoidalPE(DIMS, **options)
