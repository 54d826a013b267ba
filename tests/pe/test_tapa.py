import inspect
import math
from functools import partial
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from pelab.errors import ConfigError
from pelab.models.attention_maps import attention_maps
from pelab.pe.base import ModelDims
from pelab.pe.tapa import TapaPE
from pelab.positions import Positions
from tests.conftest import CONFIG_DIR
from tests.pe.nets import sharp_net


def dims(head_dim: int = 4, heads: int = 2, causal: bool = True) -> ModelDims:
    return ModelDims(head_dim * heads, heads, 1, causal, max_len=64)


def paper_logits(q, k, positions, theta, alpha):
    """Eq. (12) of Wang et al. 2025 with one Python loop per (batch, head, i, j) and per dim:
    ``q_A.k_A / sqrt(theta D) * cos(2 pi |m - n|^alpha q_P.k_P / sqrt((1 - theta) D))``."""
    b, h, n, d = q.shape
    a = round(theta * d)
    out = torch.empty(b, h, n, n, dtype=torch.float64)
    for bi, hi, i, j in torch.cartesian_prod(*map(torch.arange, (b, h, n, n))).tolist():
        qi, kj = q[bi, hi, i].tolist(), k[bi, hi, j].tolist()
        amplitude = sum(qi[c] * kj[c] for c in range(a)) / math.sqrt(theta * d)
        phase = sum(qi[c] * kj[c] for c in range(a, d)) / math.sqrt((1 - theta) * d)
        distance = abs(positions[bi][i] - positions[bi][j])
        out[bi, hi, i, j] = amplitude * math.cos(2 * math.pi * distance**alpha * phase)
    return out


def hooked(pe, q, k, positions, bias=0.0):
    """What the eager attention path hands the hook (its expression for ``q k^T / sqrt(D)``, plus
    another encoding's bias) and gets back, before the mask."""
    logits = torch.einsum("bhid,bhjd->bhij", q, k) * (1.0 / math.sqrt(q.shape[-1])) + bias
    return pe.modify_logits(logits, q, k, Positions.from_tensor(torch.tensor(positions)), 0)


CASES = [(4, 0.5, 0.1), (8, 0.25, 0.1), (6, 2 / 3, 0.7), (4, 0.5, 1.5)]
POSITIONS = [[0, 1, 2, 3, 4], [3, 7, 8, 20, 21]]  # row 2: gaps, distances up to 18


@pytest.mark.parametrize(("head_dim", "theta", "alpha"), CASES)
def test_logits_match_equation_12_computed_pair_by_pair(head_dim, theta, alpha):
    torch.manual_seed(0)
    pe = TapaPE(dims(head_dim), amplitude_share=theta, alpha=alpha)
    q, k = (2 * torch.randn(2, 2, 2, 5, head_dim, dtype=torch.float64)).unbind()
    expected = paper_logits(q, k, POSITIONS, theta, alpha)
    got = hooked(pe, q, k, POSITIONS)  # float64 in, float64 through (a numerical check's)
    assert got.dtype == torch.float64
    assert (got - expected).abs().max() < 1e-12
    assert not torch.allclose(got[0], got[1], atol=1e-2)  # the positions of each row act


@pytest.mark.parametrize(("head_dim", "theta", "alpha"), CASES)
def test_float32_logits_are_equation_12_up_to_float32_rounding(head_dim, theta, alpha):
    torch.manual_seed(0)
    pe = TapaPE(dims(head_dim), amplitude_share=theta, alpha=alpha)
    q, k = (2 * torch.randn(2, 2, 2, 5, head_dim)).unbind()
    expected = paper_logits(q.double(), k.double(), POSITIONS, theta, alpha)
    got = hooked(pe, q, k, POSITIONS)
    assert got.dtype == torch.float32
    # float32 rounds the cosine's argument by ~1e-7 of itself (2 pi 18^1.5 q_P.k_P reaches 1e3)
    a = round(theta * head_dim)
    amplitude = (q[..., :a] @ k[..., :a].transpose(-1, -2)).abs().double() / math.sqrt(a)
    phase = (q[..., a:] @ k[..., a:].transpose(-1, -2)).abs().double()
    distance = (torch.tensor(POSITIONS)[:, :, None] - torch.tensor(POSITIONS)[:, None]).abs()
    argument = 2 * math.pi * distance[:, None].double() ** alpha * phase
    assert ((got.double() - expected).abs() <= 1e-6 * (1 + amplitude * (1 + argument))).all()


def test_a_pair_worked_by_hand():
    # D = 2, theta = 1/2: q = (q_A, q_P) = (2, 1/4), k = (3, 1); |m - n| = 4 and alpha = 1/2,
    # so the phase is 2 pi * 4^(1/2) * 1/4 = pi and the logit 2 * 3 * cos(pi) = -6. At m = n: 6.
    pe = TapaPE(dims(head_dim=2, heads=1), amplitude_share=0.5, alpha=0.5)
    q = torch.tensor([[2.0, 0.25], [2.0, 0.25]])[None, None]  # [1, 1, 2, 2]: two queries
    k = torch.tensor([[3.0, 1.0], [3.0, 1.0]])[None, None]
    got = hooked(pe, q, k, [[0, 4]])[0, 0]
    assert torch.allclose(got, torch.tensor([[6.0, -6.0], [-6.0, 6.0]]), atol=1e-5)


def test_the_phase_grows_as_the_distance_to_the_power_alpha():
    # with alpha = 1/2 a distance of 4 doubles the phase of distance 1, and 9 triples it
    pe = TapaPE(dims(head_dim=2, heads=1), amplitude_share=0.5, alpha=0.5)
    q = torch.tensor([[1.0, 0.3]] * 4)[None, None]
    k = torch.tensor([[1.0, 0.3]] * 4)[None, None]
    row = hooked(pe, q, k, [[0, 1, 4, 9]])[0, 0, 0]  # query at 0: distances 0, 1, 4, 9
    phase = 2 * math.pi * 0.09  # 2 pi * q_P k_P at distance 1
    expected = torch.tensor([1.0, math.cos(phase), math.cos(2 * phase), math.cos(3 * phase)])
    assert torch.allclose(row, expected, atol=1e-6)


def test_only_the_distance_matters_shift_and_direction():
    torch.manual_seed(1)
    pe = TapaPE(dims(head_dim=4))
    q, k = torch.randn(2, 1, 2, 4, 4).unbind()
    base = hooked(pe, q, k, [[0, 2, 3, 7]])
    shifted = hooked(pe, q, k, [[100, 102, 103, 107]])
    assert torch.allclose(base, shifted, atol=1e-6)
    # |m - n|: a key 3 after the query scores as a key 3 before it (the encoder's case)
    mirrored = hooked(pe, q, k, [[7, 5, 4, 0]])
    assert torch.allclose(base, mirrored, atol=1e-6)
    # at m = n the cosine is 1: the amplitude part alone
    same = hooked(pe, q, k, [[5, 5, 5, 5]])
    amplitude = q[..., :2] @ k[..., :2].transpose(-1, -2) / math.sqrt(2)
    assert torch.allclose(same, amplitude, atol=1e-6)


def test_another_encodings_additive_bias_is_kept_and_q_dot_k_replaced():
    torch.manual_seed(2)
    pe = TapaPE(dims(head_dim=4))
    q, k = torch.randn(2, 1, 2, 3, 4).unbind()
    bias = torch.randn(1, 2, 3, 3)
    positions = [[0, 1, 2]]
    alone = hooked(pe, q, k, positions)
    assert torch.allclose(hooked(pe, q, k, positions, bias), alone + bias, atol=1e-6)
    assert torch.allclose(alone.double(), paper_logits(q, k, positions, 0.5, 0.1), atol=1e-6)


def test_the_defaults_are_the_papers_and_the_config_holds_them():
    pe = TapaPE(dims(head_dim=8))
    assert (pe.amplitude_share, pe.alpha) == (0.5, 0.1)  # section 4.1: alpha 0.1, theta 0.5
    assert (pe.amplitude_dim, pe.phase_dim) == (4, 4)
    config = OmegaConf.load(Path(CONFIG_DIR) / "pe" / "tapa.yaml")
    defaults = {
        name: p.default
        for name, p in inspect.signature(TapaPE).parameters.items()
        if name != "dims"
    }
    assert {key: config[key] for key in defaults} == defaults
    assert not list(pe.parameters())  # eq. (12) adds no parameters
    assert TapaPE.needs_eager_attention() and TapaPE.shift == "relative"
    assert not TapaPE.causal_only and not TapaPE.supports_kv_cache and TapaPE.prefix_only


@pytest.mark.parametrize("theta", [0.0, 1.0, -0.5, 1.5, 0.3, 0.125, True, "half", math.nan])
def test_an_amplitude_share_without_whole_dims_on_both_sides_is_refused(theta):
    # head_dim 4: theta * 4 must be 1, 2 or 3 (0.3 -> 1.2 dims; 0.125 -> half a dim)
    with pytest.raises(ConfigError, match=r"pe\.amplitude_share.*1 \.\. 3.*got") as error:
        TapaPE(dims(head_dim=4), amplitude_share=theta)
    assert repr(theta) in str(error.value)


def test_a_head_of_one_dim_cannot_split():
    with pytest.raises(ConfigError, match="amplitude_share"):
        TapaPE(dims(head_dim=1, heads=4))


@pytest.mark.parametrize("alpha", [0.0, -0.1, math.inf, math.nan, True, "0.1"])
def test_alpha_must_be_positive_and_finite(alpha):
    with pytest.raises(ConfigError, match=r"pe\.alpha.*> 0, got") as error:
        TapaPE(dims(), alpha=alpha)
    assert repr(alpha) in str(error.value)


def test_scores_stay_float32_under_bf16_autocast():
    torch.manual_seed(3)
    pe = TapaPE(dims(head_dim=8))
    q, k = (4 * torch.randn(2, 1, 2, 16, 8)).bfloat16().unbind()  # bf16, as projections give
    positions = [list(range(0, 160, 10))]  # distances up to 150
    exact = hooked(pe, q.float(), k.float(), positions)  # no autocast: float32 throughout
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = hooked(pe, q, k, positions)
    assert got.dtype == torch.float32 and torch.equal(got, exact)
    assert (got.double() - paper_logits(q, k, positions, 0.5, 0.1)).abs().max() < 1e-3


@pytest.mark.parametrize("causal", [True, False])
def test_a_network_attends_with_the_softmax_of_equation_12(causal):
    net = sharp_net(partial(TapaPE), causal=causal, n_layers=1)
    tokens = torch.tensor([[1, 5, 2, 7, 3, 0]])
    attention = net.blocks[0].attn
    original, captured = attention.probabilities, {}

    def spy(q, k, pos, bias):  # q, k as they reach the hooks: the model's own projections
        captured["q"], captured["k"] = q, k
        return original(q, k, pos, bias)

    attention.probabilities = spy
    with attention_maps(net) as maps, torch.no_grad():
        net(tokens)
    q, k = captured["q"], captured["k"]
    logits = paper_logits(q, k, [list(range(6))], 0.5, 0.1)
    if causal:
        logits = logits.masked_fill(torch.ones(6, 6).triu(1).bool(), -math.inf)
    expected = logits.softmax(-1)
    assert (maps["blocks.0.attn"][0].double() - expected).abs().max() < 1e-5
