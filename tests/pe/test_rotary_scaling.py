"""RoPE context-length scaling strategies (pe.scaling) on hand-computed frequencies."""

import math

import pytest
import torch

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims
from pelab.pe.rotary import RotaryPE
from pelab.pe.rotary_scaling import SCALINGS, RotaryScaling, ScalingInput
from pelab.positions import Positions


def dims(head_dim: int, heads: int = 1, train_max_len: int = 0) -> ModelDims:
    return ModelDims(
        d_model=head_dim * heads,
        n_heads=heads,
        n_layers=1,
        causal=True,
        max_len=64,
        train_max_len=train_max_len,
    )


def freqs(pe: RotaryPE, n: int = 4) -> tuple[torch.Tensor, float]:
    return pe.frequencies(Positions.contiguous(n))


def scores(pe: RotaryPE, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor):
    rq, rk = pe.transform_qk(q, k, Positions.from_tensor(positions), 0)
    return rq @ rk.transpose(-1, -2)  # [b h i j]


def test_the_registry_lists_every_strategy():
    assert list(SCALINGS) == ["none", "linear", "ntk", "dynamic_ntk", "yarn", "yarn_reference"]
    assert all(name == record.name for name, record in SCALINGS.items())
    needs_length = [n for n, s in SCALINGS.items() if s.needs_original_max_len]
    assert needs_length == ["dynamic_ntk", "yarn", "yarn_reference"]
    assert [n for n, s in SCALINGS.items() if s.length_dependent] == ["dynamic_ntk"]
    assert [n for n, s in SCALINGS.items() if s.min_rot_dim > 2] == ["ntk", "dynamic_ntk"]


def test_a_new_strategy_is_one_record(monkeypatch):
    # halve every frequency and scale q and k by 3: no other change to RotaryPE
    def halve(x: ScalingInput) -> torch.Tensor:
        return x.inv_freq / 2

    record = RotaryScaling("halve", halve, lambda factor: 3.0, length_dependent=True)
    monkeypatch.setitem(SCALINGS, "halve", record)
    pe = RotaryPE(dims(4), base=100.0, scaling="halve")
    inv_freq, scale = freqs(pe)
    assert torch.allclose(inv_freq, torch.tensor([0.5, 0.05])) and scale == 3.0
    assert not pe.supports_kv_cache
    with pytest.raises(ConfigError, match=r"valid choices: .*'yarn_reference', 'halve'"):
        RotaryPE(dims(4), scaling="halve_again")


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_none_is_plain_rope_exactly(layout):
    torch.manual_seed(0)
    plain = RotaryPE(dims(8, heads=2), layout=layout)
    none = RotaryPE(dims(8, heads=2), layout=layout, scaling="none", original_max_len=16)
    q, k = torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    pos = Positions.contiguous(5)
    for a, b in zip(
        plain.transform_qk(q, k, pos, 0), none.transform_qk(q, k, pos, 0), strict=True
    ):
        assert torch.equal(a, b)
    # and plain RoPE itself: pair i rotated by m * base^(-2i/r)
    assert torch.equal(freqs(none)[0], torch.tensor([1.0, 10000**-0.25, 0.01, 10000**-0.75]))


def test_linear_divides_every_frequency_by_the_factor():
    inv_freq, scale = freqs(RotaryPE(dims(4), base=100.0, scaling="linear", scaling_factor=2))
    assert torch.allclose(inv_freq, torch.tensor([0.5, 0.05])) and scale == 1.0


def test_linear_is_plain_rope_at_positions_divided_by_the_factor():
    torch.manual_seed(0)
    linear = RotaryPE(dims(8), scaling="linear", scaling_factor=4)
    plain = RotaryPE(dims(8))
    x = torch.randn(1, 1, 6, 8)
    positions = torch.arange(6)
    a, _ = linear.transform_qk(x, x, Positions.from_tensor(positions), 0)
    b, _ = plain.transform_qk(x, x, Positions.from_tensor(positions / 4), 0)
    assert torch.allclose(a, b, atol=1e-6)


def test_ntk_raises_the_base_by_factor_to_r_over_r_minus_2():
    # r = 4, base 100, s = 4: base' = 100 * 4^(4/2) = 1600 -> theta = [1, 1600^-1/2 = 0.025]
    inv_freq, scale = freqs(RotaryPE(dims(4), base=100.0, scaling="ntk", scaling_factor=4))
    assert torch.allclose(inv_freq, torch.tensor([1.0, 0.025])) and scale == 1.0


def test_ntk_keeps_the_highest_and_interpolates_the_lowest_frequency_exactly():
    inv_freq, _ = freqs(RotaryPE(dims(16), scaling="ntk", scaling_factor=8))
    plain = RotaryPE(dims(16)).inv_freq
    assert inv_freq[0] == plain[0] == 1.0
    assert torch.isclose(inv_freq[-1], plain[-1] / 8)
    assert (inv_freq[1:-1] < plain[1:-1]).all() and (inv_freq[1:-1] > plain[1:-1] / 8).all()


def test_dynamic_ntk_is_plain_rope_up_to_the_original_length():
    torch.manual_seed(0)
    dynamic = RotaryPE(dims(8), scaling="dynamic_ntk", scaling_factor=2, original_max_len=10)
    plain = RotaryPE(dims(8))
    q, k = torch.randn(1, 1, 10, 8), torch.randn(1, 1, 10, 8)
    positions = torch.arange(10)  # n = 10 = original_max_len
    assert torch.equal(scores(dynamic, q, k, positions), scores(plain, q, k, positions))


def test_dynamic_ntk_beyond_the_original_length_is_ntk_of_the_grown_factor():
    # r = 4, base 100, s = 2, L = 8, n = 16: s' = 2 * 16/8 - 1 = 3 -> base' = 100 * 3^2 = 900
    pe = RotaryPE(dims(4), base=100.0, scaling="dynamic_ntk", scaling_factor=2, original_max_len=8)
    inv_freq, _ = freqs(pe, n=16)
    assert torch.allclose(inv_freq, torch.tensor([1.0, 1 / 30]))
    assert torch.equal(freqs(pe, n=8)[0], pe.inv_freq)


def test_yarn_keeps_high_frequencies_and_interpolates_low_ones_by_the_factor():
    # r = 4, base 10^4: theta = [1, 0.01], wavelengths 2 pi and 200 pi. With L = 256 they turn
    # 40.7 (> beta = 32: unchanged) and 0.41 (< alpha = 1: divided by s) times.
    pe = RotaryPE(dims(4), scaling="yarn", scaling_factor=4, original_max_len=256)
    inv_freq, scale = freqs(pe)
    assert torch.allclose(inv_freq, torch.tensor([1.0, 0.01 / 4]))
    assert scale == pytest.approx(0.1 * math.log(4) + 1)  # sqrt(1/t), about 1.139


def test_yarn_ramps_linearly_between_alpha_and_beta():
    # theta_1 = 0.01 turns r = L / (200 pi) times; L = 16.5 * 200 pi gives r = 16.5, halfway
    # between alpha = 1 and beta = 32: theta' = 0.5 * 0.01 / s + 0.5 * 0.01
    length = round(16.5 * 200 * math.pi)
    pe = RotaryPE(dims(4), scaling="yarn", scaling_factor=2, original_max_len=length)
    gamma = (length / (200 * math.pi) - 1) / 31
    assert gamma == pytest.approx(0.5, abs=1e-3)
    expected = (1 - gamma) * 0.01 / 2 + gamma * 0.01
    assert freqs(pe)[0][1].item() == pytest.approx(expected, rel=1e-5)


def test_yarn_reference_ramps_linearly_in_the_pair_index_as_the_reference_code():
    """r = 16, base 10^4, L = 64, s = 4, by hand with HF's formulas: pair ``i`` turns
    ``64 theta_i / 2 pi`` times; it turns beta = 32 times at
    ``i = 16 ln(64 / (64 pi)) / (2 ln 10^4) = -0.124`` (floor, clipped: 0) and alpha = 1 time
    at ``i = 16 ln(64 / 2 pi) / (2 ln 10^4) = 2.017`` (ceil: 3); the kept share is
    ``1 - clamp(i / 3, 0, 1)``."""
    pe = RotaryPE(dims(16), scaling="yarn_reference", scaling_factor=4, original_max_len=64)
    theta = 10000.0 ** (-torch.arange(0, 16, 2) / 16)
    keep = 1 - (torch.arange(8) / 3).clamp(0, 1)
    expected = (1 - keep) * theta / 4 + keep * theta
    assert torch.allclose(freqs(pe)[0], expected, rtol=1e-5)
    paper = freqs(RotaryPE(dims(16), scaling="yarn", scaling_factor=4, original_max_len=64))[0]
    assert torch.equal(paper[3:], expected[3:])  # both interpolate every slow pair by s
    assert not torch.allclose(paper[:3], expected[:3])  # inside the ramp they differ
    assert freqs(pe)[1] == pytest.approx(0.1 * math.log(4) + 1)  # the same temperature


def test_yarn_temperature_scales_the_logits_by_one_over_t():
    torch.manual_seed(0)
    # L = 1: every dim turns less than alpha times, so yarn == linear up to the temperature
    yarn = RotaryPE(dims(8), base=100.0, scaling="yarn", scaling_factor=4, original_max_len=1)
    linear = RotaryPE(dims(8), base=100.0, scaling="linear", scaling_factor=4)
    q, k = torch.randn(1, 1, 5, 8), torch.randn(1, 1, 5, 8)
    positions = torch.arange(5)
    one_over_t = (0.1 * math.log(4) + 1) ** 2
    expected = scores(linear, q, k, positions) * one_over_t
    assert torch.allclose(scores(yarn, q, k, positions), expected, atol=1e-5)


@pytest.mark.parametrize("scaling", ["linear", "ntk", "yarn", "yarn_reference"])
def test_static_strategies_keep_scores_shift_invariant(scaling):
    torch.manual_seed(0)
    pe = RotaryPE(dims(8), scaling=scaling, scaling_factor=3, original_max_len=16)
    q, k = torch.randn(1, 1, 6, 8), torch.randn(1, 1, 6, 8)
    base = torch.arange(6)
    assert torch.allclose(scores(pe, q, k, base), scores(pe, q, k, base + 50), atol=1e-4)


@pytest.mark.parametrize("scaling", ["dynamic_ntk", "yarn"])
def test_the_original_length_defaults_to_the_models_training_length(scaling):
    torch.manual_seed(0)
    options = dict(base=100.0, scaling=scaling, scaling_factor=4)
    given = RotaryPE(dims(8), original_max_len=20, **options)
    from_dims = RotaryPE(dims(8, train_max_len=20), **options)
    assert from_dims.original_max_len == 20
    q, k = torch.randn(1, 1, 40, 8), torch.randn(1, 1, 40, 8)
    positions = torch.arange(40)  # beyond 20: dynamic NTK grows its factor
    assert torch.equal(scores(from_dims, q, k, positions), scores(given, q, k, positions))
    # and the length matters: another one changes the scores
    other = RotaryPE(dims(8, train_max_len=20), original_max_len=5, **options)
    assert not torch.allclose(scores(other, q, k, positions), scores(given, q, k, positions))


def test_an_explicit_original_length_overrides_the_models_training_length():
    pe = RotaryPE(
        dims(4, train_max_len=1000), scaling="yarn", scaling_factor=4, original_max_len=256
    )
    assert pe.original_max_len == 256
    assert torch.allclose(freqs(pe)[0], torch.tensor([1.0, 0.01 / 4]))  # as with L = 256 alone


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"scaling": "rescale"}, r"unknown pe.scaling 'rescale'; valid choices: .*'yarn'"),
        (
            {"scaling": "yarn", "scaling_factor": 4},
            r"pe.scaling=yarn needs pe.original_max_len or the model's train_max_len .*neither",
        ),
        ({"scaling": "yarn", "original_max_len": 0}, r"pe.scaling=yarn needs .*got 0"),
        ({"scaling": "dynamic_ntk"}, r"pe.scaling=dynamic_ntk needs pe.original_max_len"),
        ({"scaling_factor": 4}, r"pe.scaling_factor=4 has no effect with pe.scaling=none"),
        ({"scaling": "linear", "scaling_factor": 0.5}, r"scaling_factor must be >= 1 .*got 0.5"),
        ({"scaling": "ntk", "fraction": 0.25}, r"needs r >= 4 rotated dims; got r=2"),
    ],
)
def test_bad_scaling_settings_are_refused_by_name(options, message):
    with pytest.raises(ConfigError, match=message):
        RotaryPE(dims(8), **options)
