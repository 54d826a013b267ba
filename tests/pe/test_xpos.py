"""xPos: RoPE with a per-pair decay zeta_i^((n - m) / gamma) on the scores."""

import math

import pytest
import torch

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims
from pelab.pe.rotary import RotaryPE, XPosPE
from pelab.positions import Positions


def dims(head_dim: int, heads: int = 1, causal: bool = True) -> ModelDims:
    return ModelDims(
        d_model=head_dim * heads, n_heads=heads, n_layers=1, causal=causal, max_len=64
    )


def scores(pe: RotaryPE, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor):
    rq, rk = pe.transform_qk(q, k, Positions.from_tensor(positions), 0)
    return rq @ rk.transpose(-1, -2)  # [b h i j]


def test_zeta_uses_the_paper_constants():
    # r = 4: zeta_i = (i / 2 + 0.4) / 1.4 for i = 0, 1
    pe = XPosPE(dims(4))
    assert torch.allclose(pe.zeta, torch.tensor([0.4 / 1.4, 0.9 / 1.4]))
    assert pe.scale_base == 512.0 and pe.causal_only


def test_one_pair_by_hand():
    # head_dim 2, theta = 1: q at n is rotated by n and scaled by zeta^((n - c)/gamma), k by
    # zeta^(-(n - c)/gamma), zeta = 2/7, centre c = (max_len - 1)/2 = 31.5
    pe = XPosPE(dims(2), scale_base=16.0)
    x = torch.tensor([1.0, 0.0]).expand(1, 1, 3, 2)
    q, k = pe.transform_qk(x, x, Positions.contiguous(3), 0)
    zeta = 0.4 / 1.4
    for n in range(3):
        angle = torch.tensor(float(n))
        direction = torch.stack((angle.cos(), angle.sin()))
        assert torch.allclose(q[0, 0, n], zeta ** ((n - 31.5) / 16) * direction, rtol=1e-5)
        assert torch.allclose(k[0, 0, n], zeta ** (-(n - 31.5) / 16) * direction, rtol=1e-5)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_scores_depend_on_the_offset_only(layout):
    torch.manual_seed(0)
    pe = XPosPE(dims(8, heads=2), layout=layout, scale_base=16.0)
    q, k = torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    base = torch.arange(6)
    reference = scores(pe, q, k, base)
    for shift in (7, 40):
        assert torch.allclose(reference, scores(pe, q, k, base + shift), atol=1e-4)
    # the decay is there: the scores differ from plain RoPE's
    rope = RotaryPE(dims(8, heads=2), layout=layout)
    assert not torch.allclose(reference, scores(rope, q, k, base), atol=1e-3)


def test_equal_vectors_score_less_the_further_back_the_key():
    # only the last pair is set: theta_3 = 1e8^(-3/4) = 1e-6 barely turns, zeta_3 = 1.15 / 1.4
    pe = XPosPE(dims(8), base=1e8, scale_base=8.0)
    x = torch.zeros(1, 1, 12, 8)
    x[..., 6:] = 1.0
    last_row = scores(pe, x, x, torch.arange(12))[0, 0, -1]  # query 11 against keys 0..11
    assert (last_row[:-1] < last_row[1:]).all()
    expected = 2 * (1.15 / 1.4) ** (torch.arange(11, -1, -1) / 8.0)  # |x|^2 zeta^(offset/gamma)
    assert torch.allclose(last_row, expected, atol=1e-5)


def test_the_decay_matches_zeta_to_the_offset_over_gamma():
    pe = XPosPE(dims(2), scale_base=4.0)  # one pair, theta = 1, zeta = 2/7
    q, k = torch.tensor([1.0, 0.0]).expand(1, 1, 6, 2), torch.tensor([1.0, 0.0]).expand(1, 1, 6, 2)
    s = scores(pe, q, k, torch.arange(6))[0, 0]
    for n, m in [(5, 0), (5, 3), (2, 2)]:
        expected = (0.4 / 1.4) ** ((n - m) / 4.0) * torch.cos(torch.tensor(float(n - m)))
        assert s[n, m].item() == pytest.approx(expected.item(), abs=1e-6)


def test_far_positions_stay_finite_and_score_as_near_ones():
    # zeta_0^(-m/gamma) alone overflows float32 from m ~ 36k (gamma = 512); centred, 50k fit
    pe = XPosPE(ModelDims(d_model=8, n_heads=1, n_layers=1, causal=True, max_len=50_000))
    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 6, 8), torch.randn(1, 1, 6, 8)
    far = scores(pe, q, k, torch.arange(49_994, 50_000))
    assert far.isfinite().all()
    # as close as plain RoPE gets: float32 angles m theta_i are off by ~1e-4 rad at m ~ 5e4
    assert torch.allclose(far, scores(pe, q, k, torch.arange(6)), rtol=0, atol=2e-3)


def test_a_max_len_beyond_float32_range_is_refused():
    # |log scale| <= (max_len - 1)/2 * ln(1/zeta_0)/gamma <= 70: max_len <= 140 * 512 / ln 3.5 + 1
    longest = int(140 * 512 / math.log(3.5)) + 1
    XPosPE(ModelDims(8, 1, 1, True, longest))
    message = rf"max_len={longest + 1} .* the longest max_len is {longest}"
    with pytest.raises(ConfigError, match=message):
        XPosPE(ModelDims(8, 1, 1, True, longest + 1))
    XPosPE(ModelDims(8, 1, 1, True, 2 * longest), scale_base=1024.0)  # a slower decay fits


def test_an_encoder_is_refused_with_a_clear_message():
    with pytest.raises(
        ConfigError, match=r"pe=xpos is defined for causal models only; use model=decoder"
    ):
        XPosPE(dims(8, causal=False))


def test_bad_constants_are_refused():
    with pytest.raises(ConfigError, match=r"gamma_b and pe.scale_base must be > 0, got 0.4 and 0"):
        XPosPE(dims(8), scale_base=0)


def test_scaling_strategies_apply_to_xpos_too():
    pe = XPosPE(dims(4), base=100.0, scaling="linear", scaling_factor=2)
    inv_freq, _ = pe.frequencies(Positions.contiguous(3))
    assert torch.allclose(inv_freq, torch.tensor([0.5, 0.05]))


def test_xpos_scaling_reads_the_training_length_from_the_model_dims():
    torch.manual_seed(0)
    trained = ModelDims(8, 1, 1, True, max_len=64, train_max_len=16)
    options = dict(scaling="yarn", scaling_factor=4, scale_base=16.0)
    from_dims = XPosPE(trained, **options)
    given = XPosPE(dims(8), original_max_len=16, **options)
    q, k = torch.randn(1, 1, 30, 8), torch.randn(1, 1, 30, 8)
    positions = torch.arange(30)
    assert torch.equal(scores(from_dims, q, k, positions), scores(given, q, k, positions))
    with pytest.raises(ConfigError, match=r"pe.scaling=yarn needs pe.original_max_len"):
        XPosPE(dims(8), **options)
