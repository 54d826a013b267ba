import math

import pytest
import torch

from pelab.pe.base import ModelDims
from pelab.pe.bias import AlibiPE, T5BiasPE, alibi_slopes, t5_bucket
from pelab.positions import Positions


def test_alibi_slopes_for_eight_heads_are_the_papers_sequence():
    assert torch.allclose(alibi_slopes(8), torch.tensor([2.0**-i for i in range(1, 9)]))


@pytest.mark.parametrize("heads", [1, 2, 4, 16, 32])
def test_alibi_slopes_are_geometric_for_powers_of_two(heads):
    slopes = alibi_slopes(heads)
    start = 2.0 ** (-8 / heads)
    assert slopes[0] == pytest.approx(start)
    assert torch.allclose(slopes[1:] / slopes[:-1], torch.full((heads - 1,), start))


def test_alibi_slopes_for_other_head_counts_interleave_the_next_power_of_two():
    # 6 heads: the 4-head slopes, then slopes 1 and 3 of the 8-head sequence (paper, sec. 3)
    expected = [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]
    assert torch.allclose(alibi_slopes(6), torch.tensor(expected))
    assert len(alibi_slopes(12)) == 12


def test_alibi_bias_is_minus_slope_times_distance():
    pe = AlibiPE(ModelDims(8, 2, 1, True, 16))  # slopes 1/16, 1/256
    bias = pe.logit_bias(Positions.contiguous(3), 0)[0]
    distance = torch.tensor([[0, 1, 2], [1, 0, 1], [2, 1, 0]]).float()
    assert torch.allclose(bias[0], -distance / 16)
    assert torch.allclose(bias[1], -distance / 256)


def test_alibi_bias_is_invariant_to_shifting_all_positions():
    pe = AlibiPE(ModelDims(8, 4, 1, True, 16))
    a = pe.logit_bias(Positions.contiguous(5), 0)
    b = pe.logit_bias(Positions.contiguous(5, offset=1000), 0)
    assert torch.equal(a, b)


def reference_bucket(rel: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """T5's bucket function for one relative position (j - i), written from the paper's code
    description with scalar math, independent of the vectorised implementation."""
    n = -rel
    ret = 0
    if bidirectional:
        num_buckets //= 2
        if n < 0:
            ret += num_buckets
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    large = max_exact + int(
        math.log(n / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    )
    return ret + min(large, num_buckets - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_buckets_match_the_scalar_reference(bidirectional):
    rel = torch.arange(-300, 301)
    got = t5_bucket(rel, bidirectional, 32, 128)
    expected = [reference_bucket(int(r), bidirectional, 32, 128) for r in rel]
    assert got.tolist() == expected


def test_t5_bucket_boundaries_at_hand_computed_points():
    def b(rel, bidi=True):
        return int(t5_bucket(torch.tensor(rel), bidi, 32, 128))

    assert b(0) == 0
    assert b(-1) == 1 and b(-7) == 7  # exact range: keys 1..7 behind the query
    assert b(1) == 17 and b(7) == 23  # keys ahead use the second half of the buckets
    assert b(-8) == 8  # first log bucket
    assert b(-127) == 15 and b(-1000) == 15  # all far distances share the last bucket
    assert b(3, bidi=False) == 0  # causal: future keys fall in bucket 0 (masked anyway)
    assert b(-16, bidi=False) == 16 and b(-5000, bidi=False) == 31


def test_t5_bias_looks_up_one_learned_scalar_per_head_and_bucket():
    pe = T5BiasPE(ModelDims(8, 2, 1, False, 16), num_buckets=8, max_distance=16)
    with torch.no_grad():
        pe.bias.weight.copy_(torch.arange(16.0).view(8, 2))
    bias = pe.logit_bias(Positions.contiguous(3), 0)[0]  # [h, i, j]
    buckets = t5_bucket(torch.arange(3)[None, :] - torch.arange(3)[:, None], True, 8, 16)
    assert torch.equal(bias[0], pe.bias.weight[buckets, 0])
    assert torch.equal(bias[1], pe.bias.weight[buckets, 1])


def test_t5_bias_is_invariant_to_shifting_all_positions():
    pe = T5BiasPE(ModelDims(8, 2, 1, True, 16))
    torch.nn.init.normal_(pe.bias.weight)
    a = pe.logit_bias(Positions.contiguous(6), 0)
    b = pe.logit_bias(Positions.contiguous(6, offset=37), 0)
    assert torch.equal(a, b)
