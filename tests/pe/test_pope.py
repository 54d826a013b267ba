"""PoPE (pe=pope): the paper's score on hand-computed values, its defining properties, and the
values of lucidrains' PoPE-pytorch (tests/pe/reference/pope.json, made by make_pope.py)."""

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from pelab.errors import ConfigError
from pelab.models.attention import Attention
from pelab.pe.base import ModelDims
from pelab.pe.pope import PolarPE
from pelab.positions import Positions

REFERENCE = Path(__file__).parent / "reference" / "pope.json"
LN2 = math.log(2.0)
SOFTPLUS_INVERSE_OF_1 = math.log(math.e - 1)  # softplus(x) = 1


def dims(d_model: int = 8, n_heads: int = 2, n_layers: int = 2) -> ModelDims:
    return ModelDims(d_model=d_model, n_heads=n_heads, n_layers=n_layers, causal=False, max_len=64)


def scores(pe: PolarPE, q, k, pos_q, pos_k, layer: int = 0) -> torch.Tensor:
    """``q~ · k~`` after the hook (unscaled), ``[b, h, i, j]``."""
    pos = Positions(torch.as_tensor(pos_q)[None], torch.as_tensor(pos_k)[None])
    q_out, k_out = pe.transform_qk(q, k, pos, layer)
    return q_out @ k_out.transpose(-1, -2)


# ---- the paper's score on values computed by hand ----------------------------------------------

# one head of d = 2 with base 100: theta = (1, 0.1); the query at t = 3 has magnitudes
# softplus(q) = (ln 2, 1), the key at s = 1 has softplus(k) = (1, ln 2); s - t = -2
Q = torch.tensor([0.0, SOFTPLUS_INVERSE_OF_1]).view(1, 1, 1, 2)
K = torch.tensor([SOFTPLUS_INVERSE_OF_1, 0.0]).view(1, 1, 1, 2)


def tiny(phase_bias: bool) -> PolarPE:
    return PolarPE(dims(d_model=2, n_heads=1), base=100.0, phase_bias=phase_bias)


def test_the_score_is_the_papers_sum_of_magnitudes_times_cosines_of_the_offset():
    # a = sum_c softplus(q_c) softplus(k_c) cos((s - t) theta_c) = ln2 cos(-2) + ln2 cos(-0.2)
    expected = LN2 * math.cos(2.0) + LN2 * math.cos(0.2)
    for pe in (tiny(phase_bias=False), tiny(phase_bias=True)):  # delta starts at 0
        assert scores(pe, Q, K, [3], [1]).item() == pytest.approx(expected, abs=1e-6)
    # the reverse order: the key after the query (an encoder), s - t = +2, the same cosines
    assert scores(tiny(False), K, Q, [1], [3]).item() == pytest.approx(expected, abs=1e-6)


def test_the_phase_bias_shifts_the_key_phase_and_is_clamped_to_minus_two_pi_zero():
    pe = tiny(phase_bias=True)
    with torch.no_grad():
        pe.phase_bias[0, 0] = torch.tensor([-1.0, -0.5])
    # cos((s - t) theta_c + delta_c): cos(-2 - 1) and cos(-0.2 - 0.5)
    expected = LN2 * math.cos(3.0) + LN2 * math.cos(0.7)
    assert scores(pe, Q, K, [3], [1]).item() == pytest.approx(expected, abs=1e-6)
    with torch.no_grad():  # beyond the range: -10 -> -2 pi (a full turn), 0.7 -> 0
        pe.phase_bias[0, 0] = torch.tensor([-10.0, 0.7])
    unbiased = LN2 * math.cos(2.0) + LN2 * math.cos(0.2)
    assert scores(pe, Q, K, [3], [1]).item() == pytest.approx(unbiased, abs=1e-6)
    # layer 1 has its own bias, still 0
    assert scores(pe, Q, K, [3], [1], layer=1).item() == pytest.approx(unbiased, abs=1e-6)


def test_d_frequencies_per_head_from_the_base():
    pe = PolarPE(dims(d_model=8, n_heads=2), base=10000.0)
    assert torch.allclose(pe.theta, torch.tensor([1.0, 10.0**-1, 10.0**-2, 10.0**-3]))


# ---- defining properties --------------------------------------------------------------------


def random_qk(n: int = 6, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return tuple(3 * torch.randn(2, 2, n, 4, generator=g) for _ in range(2))


def test_q_and_k_leave_the_hook_with_twice_the_head_dim_in_their_dtype():
    q, k = random_qk()
    q_out, k_out = PolarPE(dims()).transform_qk(q, k, Positions.contiguous(6), 0)
    assert q_out.shape == k_out.shape == (2, 2, 6, 8) and q_out.dtype == q.dtype


def test_scores_depend_only_on_the_offset():
    pe = PolarPE(dims(), phase_bias_init="uniform")
    q, k = random_qk()
    pos = torch.tensor([0, 2, 3, 7, 8, 15])
    base = scores(pe, q, k, pos, pos)
    assert torch.allclose(base, scores(pe, q, k, pos + 37, pos + 37), atol=1e-4)
    # a change of one offset changes the scores
    assert not torch.allclose(base, scores(pe, q, k, pos, pos.flip(0)), atol=1e-2)


def test_magnitudes_are_the_softplus_of_the_content_and_nonnegative():
    pe = PolarPE(dims(), phase_bias_init="uniform")
    q, k = random_qk()
    q_out, k_out = pe.transform_qk(q, k, Positions.contiguous(6, offset=5), 1)
    for x, out in ((q, q_out), (k, k_out)):
        cos_part, sin_part = out.chunk(2, dim=-1)
        magnitude = torch.sqrt(cos_part**2 + sin_part**2)
        assert torch.allclose(magnitude, F.softplus(x), atol=1e-5) and (magnitude > 0).all()


def test_phases_come_from_position_alone_never_from_the_content_angle():
    """RoPE's phase of a pair is the content angle plus the position's; PoPE's is the position's
    (plus the key's bias) whatever the content, negative components included."""
    pe = PolarPE(dims(), phase_bias_init="uniform")
    q, k = random_qk()
    positions = torch.tensor([1, 4, 5, 9, 20, 33])
    q_out, k_out = pe.transform_qk(q, k, Positions(positions[None], positions[None]), 1)
    expected_q = positions[:, None] * pe.theta  # [n, d]
    expected_k = expected_q + pe.phase_bias[1].clamp(-2 * math.pi, 0)[:, None]  # [h, n, d]
    for out, expected in ((q_out, expected_q), (k_out, expected_k)):
        cos_part, sin_part = out.chunk(2, dim=-1)
        phase = torch.atan2(sin_part, cos_part)
        gap = torch.remainder(phase - expected + math.pi, 2 * math.pi) - math.pi
        assert gap.abs().max() < 1e-4


def test_at_offset_zero_without_bias_the_score_is_the_product_of_magnitudes():
    pe = PolarPE(dims(), phase_bias=False)
    q, k = random_qk()
    pos = torch.full((6,), 11)
    expected = F.softplus(q) @ F.softplus(k).transpose(-1, -2)
    assert torch.allclose(scores(pe, q, k, pos, pos), expected, atol=1e-4)


def test_attention_scales_by_one_over_sqrt_of_the_models_head_dim_not_twice_it():
    torch.manual_seed(0)
    pe = PolarPE(dims(d_model=8, n_heads=2, n_layers=1))
    attn = Attention(8, 2, causal=False, pe=pe, layer=0, impl="eager")
    x, pos = torch.randn(1, 5, 8), Positions.contiguous(5)
    q, k, _ = attn.heads(attn.qkv(x))
    q_out, k_out = pe.transform_qk(q, k, pos, 0)
    probs = attn.probabilities(q_out, k_out, pos, None)
    expected = (scores(pe, q, k, torch.arange(5), torch.arange(5)) / math.sqrt(4)).softmax(-1)
    assert torch.allclose(probs, expected, atol=1e-6)


def test_the_phase_bias_is_a_parameter_per_layer_head_and_frequency():
    assert PolarPE(dims(n_layers=3)).phase_bias.shape == (3, 2, 4)
    assert not list(PolarPE(dims(), phase_bias=False).parameters())
    torch.manual_seed(0)
    drawn = PolarPE(dims(), phase_bias_init="uniform").phase_bias
    assert (drawn >= -2 * math.pi).all() and (drawn <= 0).all() and drawn.std() > 0.5


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"phase_bias_init": "normal"},
            "phase_bias_init='normal' is not a choice; .*zero, uniform",
        ),
        ({"phase_bias": False, "phase_bias_init": "uniform"}, "no effect"),
        ({"base": 0.0}, "base"),
    ],
)
def test_bad_options_raise_config_errors(options, message):
    with pytest.raises(ConfigError, match=message):
        PolarPE(dims(), **options)


# ---- the reference implementation's values ----------------------------------------------------


def load_reference() -> dict:
    return json.loads(REFERENCE.read_text())


def halves(interleaved: torch.Tensor) -> torch.Tensor:
    """The reference's layout ``[.., (d two)]`` -> pelab's ``[.., (two d)]``."""
    return interleaved.unflatten(-1, (-1, 2)).transpose(-1, -2).flatten(-2)


@pytest.mark.parametrize("case", load_reference()["cases"], ids=lambda c: c["name"])
def test_matches_lucidrains_pope_pytorch(case):
    q, k = torch.tensor(case["q"]), torch.tensor(case["k"])
    h, d = q.shape[1], q.shape[-1]
    bias = case["phase_bias"]
    pe = PolarPE(dims(d_model=h * d, n_heads=h, n_layers=1), case["base"], bias is not None)
    if bias is not None:
        with torch.no_grad():
            pe.phase_bias[0] = torch.tensor(bias)
    pos = Positions(torch.tensor(case["pos_q"])[None], torch.tensor(case["pos_k"])[None])
    q_out, k_out = pe.transform_qk(q, k, pos, 0)
    assert torch.allclose(q_out, halves(torch.tensor(case["q_out"])), rtol=0, atol=1e-6)
    assert torch.allclose(k_out, halves(torch.tensor(case["k_out"])), rtol=0, atol=1e-6)
    logits = q_out @ k_out.transpose(-1, -2)
    assert torch.allclose(logits, torch.tensor(case["logits"]), rtol=0, atol=1e-5)


def test_the_reference_data_names_its_commit():
    data = load_reference()
    assert data["commit"] == "ee11cab0dda8361b02fec56975e84e419ea6a631"
    assert data["package_version"] == "0.0.15"
    assert [c["name"] for c in data["cases"]] == ["no_phase_bias", "phase_bias", "query_suffix"]
