import pytest
import torch

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims
from pelab.pe.t5_bias_2d import T5Bias2dPE
from pelab.positions import Positions
from tests.pe.test_bias import reference_bucket


def make(causal: bool = True, heads: int = 2, **kwargs) -> T5Bias2dPE:
    """Tables filled with distinct values: row bucket b, head h -> 100 b + h; column -> -b / 8."""
    pe = T5Bias2dPE(ModelDims(8, heads, 1, causal, 64, 10, position_dims=2), **kwargs)
    buckets = torch.arange(pe.num_buckets, dtype=torch.float32)[:, None]
    with torch.no_grad():
        pe.row_bias.weight.copy_(100 * buckets + torch.arange(heads))
        pe.col_bias.weight.copy_((-buckets / 8).expand(-1, heads))
    return pe


def bias(pe: T5Bias2dPE, coords) -> torch.Tensor:
    return pe.logit_bias(Positions.from_tensor(torch.as_tensor(coords)[None]), 0)[0]  # [h, i, j]


def test_exact_values_at_hand_computed_offsets():
    # 32 buckets, bidirectional: key behind (j - i = -d) -> bucket d, key ahead (+d) -> 16 + d
    out = bias(make(), [[0, 0], [0, 1], [2, 0]])
    # (i, j) = (0, 1): row offset 0 -> bucket 0; column offset +1 -> bucket 17
    assert out[:, 0, 1].tolist() == [0 - 17 / 8, 1 - 17 / 8]
    # (1, 2): row +2 -> bucket 18; column -1 -> bucket 1
    assert out[:, 1, 2].tolist() == [1800 - 1 / 8, 1801 - 1 / 8]
    # (2, 0): row -2 -> bucket 2; column 0 -> bucket 0
    assert out[:, 2, 0].tolist() == [200, 201]
    assert (out[:, range(3), range(3)] == torch.tensor([[0.0], [1.0]])).all()  # (0, 0) offset


def test_every_offset_matches_the_scalar_bucket_reference_per_axis():
    pe = make(num_buckets=16, max_distance=40)
    coords = torch.tensor([[r, c] for r in range(0, 60, 7) for c in range(0, 90, 11)])
    out = bias(pe, coords)[1]  # head 1
    row, col = pe.row_bias.weight[:, 1], pe.col_bias.weight[:, 1]
    for i, (ri, ci) in enumerate(coords.tolist()):
        for j, (rj, cj) in enumerate(coords.tolist()):
            expected = (
                row[reference_bucket(rj - ri, True, 16, 40)]
                + col[reference_bucket(cj - ci, True, 16, 40)]
            )
            assert out[i, j] == expected, (i, j)


def test_the_bias_is_a_row_term_plus_a_column_term():
    torch.manual_seed(0)
    pe = T5Bias2dPE(ModelDims(8, 3, 1, False, 64, 10, position_dims=2))
    for table in (pe.row_bias, pe.col_bias):
        torch.nn.init.normal_(table.weight)
    query = torch.tensor([[[5, 5]]])  # keys at every offset in [-5, 5]², row by row
    keys = query + torch.tensor([[dr, dc] for dr in range(-5, 6) for dc in range(-5, 6)])
    out = pe.logit_bias(Positions(query, keys), 0)[0, :, 0].unflatten(-1, (11, 11))  # [h, dr, dc]
    separable = out[:, :, 5:6] + out[:, 5:6, :] - out[:, 5:6, 5:6]  # B(dr, 0) + B(0, dc) - B(0, 0)
    assert torch.allclose(out, separable, atol=1e-6)


@pytest.mark.parametrize("causal", [True, False])
def test_invariant_to_shifting_all_positions_in_each_axis(causal):
    pe = make(causal)
    coords = torch.randint(0, 6, (9, 2))
    base = bias(pe, coords)
    for shift in ([4, 0], [0, 9], [13, 2]):
        assert torch.equal(base, bias(pe, coords + torch.tensor(shift))), shift


def test_a_decoder_keeps_both_directions_on_each_axis():
    # in the sequence, the previous row's later columns come before the query: column +1 and -1
    # must be different learned values even in a causal model
    out = bias(make(causal=True), [[0, 0], [0, 1], [1, 0]])
    assert out[0, 2, 1] != out[0, 1, 2]  # (row -1, col +1) vs (row +1, col -1)


def test_far_offsets_share_the_last_bucket_of_their_direction():
    out = bias(make(max_distance=32), [[0, 0], [0, 200], [0, 500], [0, -500]])
    assert out[0, 0, 1] == out[0, 0, 2] == -31 / 8  # ahead: last bucket 31
    assert out[0, 0, 3] == -15 / 8  # behind: last bucket 15


def test_tables_start_at_zero_and_are_shared_by_layers():
    pe = T5Bias2dPE(ModelDims(8, 2, 3, True, 64, 10, position_dims=2))
    assert pe.row_bias.weight.abs().sum() == pe.col_bias.weight.abs().sum() == 0
    assert sum(p.numel() for p in pe.parameters()) == 2 * 32 * 2


@pytest.mark.parametrize(("num_buckets", "max_distance"), [(2, 128), (8, 2)])
def test_too_few_buckets_or_too_short_a_range_is_refused(num_buckets, max_distance):
    with pytest.raises(
        ConfigError, match=rf"num_buckets={num_buckets}, max_distance={max_distance}"
    ):
        make(num_buckets=num_buckets, max_distance=max_distance)


def test_one_dimensional_positions_are_refused_clearly():
    with pytest.raises(ConfigError, match=r"pe=t5_bias_2d reads 2-D positions"):
        make().logit_bias(Positions.contiguous(4), 0)
