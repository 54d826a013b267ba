import math

import pytest
import torch

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims
from pelab.pe.rotary import RotaryPE
from pelab.positions import Positions


def dims(head_dim: int, heads: int = 1) -> ModelDims:
    return ModelDims(d_model=head_dim * heads, n_heads=heads, n_layers=1, causal=True, max_len=64)


def rotated(pe: RotaryPE, x: torch.Tensor, positions: list[int]) -> torch.Tensor:
    pos = Positions.from_tensor(torch.tensor(positions))
    q, _ = pe.transform_qk(x, x, pos, 0)
    return q


def test_two_dim_rotation_matches_the_hand_computed_angle():
    pe = RotaryPE(dims(2))  # one pair, theta = base^0 = 1
    x = torch.tensor([1.0, 0.0]).expand(1, 1, 3, 2)
    out = rotated(pe, x, [0, 1, 2])[0, 0]
    expected = torch.tensor([[1.0, 0.0], [math.cos(1), math.sin(1)], [math.cos(2), math.sin(2)]])
    assert torch.allclose(out, expected, atol=1e-6)


def test_frequencies_follow_base_to_the_minus_2i_over_d():
    pe = RotaryPE(dims(8), base=100.0)
    assert torch.allclose(pe.inv_freq, torch.tensor([1.0, 100**-0.25, 100**-0.5, 100**-0.75]))


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_score_depends_only_on_the_relative_offset(layout, fraction):
    torch.manual_seed(0)
    pe = RotaryPE(dims(8, heads=2), layout=layout, fraction=fraction)
    q, k = torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    base = torch.arange(6)
    scores = []
    for shift in (0, 7, 100):
        pos = Positions.from_tensor(base + shift)
        rq, rk = pe.transform_qk(q, k, pos, 0)
        scores.append(rq @ rk.transpose(-1, -2))
    assert torch.allclose(scores[0], scores[1], atol=1e-4)
    assert torch.allclose(scores[0], scores[2], atol=1e-4)
    # and the positions do matter: unrotated scores differ
    assert not torch.allclose(scores[0], q @ k.transpose(-1, -2), atol=1e-3)


def test_rotation_preserves_norms():
    pe = RotaryPE(dims(16))
    x = torch.randn(2, 1, 5, 16)
    assert torch.allclose(rotated(pe, x, [3, 1, 4, 1, 5]).norm(dim=-1), x.norm(dim=-1), atol=1e-5)


def test_half_layout_is_interleaved_up_to_a_fixed_permutation():
    interleaved, half = RotaryPE(dims(8)), RotaryPE(dims(8), layout="half")
    perm = torch.tensor([0, 2, 4, 6, 1, 3, 5, 7])  # interleaved index of half-layout slot
    x = torch.randn(1, 1, 4, 8)
    a = rotated(interleaved, x, [0, 1, 2, 3])
    b = rotated(half, x[..., perm], [0, 1, 2, 3])
    assert torch.allclose(a[..., perm], b, atol=1e-6)


def test_partial_rotation_leaves_the_remaining_dims_unchanged():
    pe = RotaryPE(dims(8), fraction=0.5)
    x = torch.randn(1, 1, 3, 8)
    out = rotated(pe, x, [5, 6, 7])
    assert torch.equal(out[..., 4:], x[..., 4:])
    assert not torch.allclose(out[..., :4], x[..., :4])


def test_odd_rotated_dimension_is_refused_with_the_numbers():
    with pytest.raises(ConfigError, match=r"head_dim=6 .*fraction=0.5 -> 3 dims"):
        RotaryPE(dims(6), fraction=0.5)
    with pytest.raises(ConfigError, match="head_dim=5"):
        RotaryPE(ModelDims(d_model=5, n_heads=1, n_layers=1, causal=True, max_len=8))


def test_unknown_layout_names_valid_choices():
    with pytest.raises(ConfigError, match="interleaved"):
        RotaryPE(dims(8), layout="spiral")


def test_p_rope_keeps_the_highest_frequencies_and_zeroes_the_rest():
    pe = RotaryPE(dims(16), base=100.0, keep_frequencies=0.5)  # 8 pairs: the first 4 keep theta_i
    frequencies, _ = pe.frequencies(Positions.from_tensor(torch.arange(4)))
    expected = 100.0 ** (-torch.arange(0, 16, 2).float() / 16)
    assert torch.equal(frequencies[:4], expected[:4]) and torch.all(frequencies[4:] == 0)
    assert int(RotaryPE(dims(16), keep_frequencies=0.3).kept.sum()) == 2  # floor(0.3 * 8)


def test_p_rope_pairs_without_a_frequency_never_turn_and_scores_stay_relative():
    torch.manual_seed(0)
    pe = RotaryPE(dims(8), layout="half", keep_frequencies=0.5)  # pairs (i, i + 4): 2 of 4 turn
    x = torch.randn(1, 1, 5, 8)
    out = rotated(pe, x, [0, 7, 30, 100, 1000])
    still = [2, 3, 6, 7]  # the two lowest-frequency pairs
    assert torch.equal(out[..., still], x[..., still])
    assert not torch.allclose(out[..., 1, :2], x[..., 1, :2])  # the kept ones turn
    q, k = torch.randn(1, 1, 6, 8), torch.randn(1, 1, 6, 8)
    scores = []
    for shift in (0, 50):
        pos = Positions.from_tensor(torch.arange(6) + shift)
        rq, rk = pe.transform_qk(q, k, pos, 0)
        scores.append(rq @ rk.transpose(-1, -2))
    torch.testing.assert_close(scores[0], scores[1], rtol=1e-4, atol=1e-4)


def test_p_rope_at_zero_rotates_nothing_even_when_scaled():
    x = torch.randn(1, 1, 4, 8)
    for scaling in ("none", "ntk", "linear"):
        factor = 1.0 if scaling == "none" else 4.0
        pe = RotaryPE(dims(8), keep_frequencies=0.0, scaling=scaling, scaling_factor=factor)
        assert torch.equal(rotated(pe, x, [0, 3, 9, 40]), x), scaling


@pytest.mark.parametrize("bad", [-0.1, 1.5])
def test_p_rope_outside_zero_to_one_is_refused_with_the_value(bad):
    with pytest.raises(ConfigError, match=rf"pe.keep_frequencies \(p-RoPE's p\).*got {bad}"):
        RotaryPE(dims(8), keep_frequencies=bad)
