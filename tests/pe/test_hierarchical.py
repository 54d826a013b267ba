import pytest
import torch

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims
from pelab.pe.hierarchical import HierarchicalPE
from pelab.positions import Positions


def dims(max_len: int, d_model: int = 2) -> ModelDims:
    return ModelDims(d_model=d_model, n_heads=1, n_layers=1, causal=True, max_len=max_len)


def with_table(table: list[list[float]], alpha: float = 0.4) -> HierarchicalPE:
    rows = torch.tensor(table)
    pe = HierarchicalPE(dims(len(rows) ** 2, rows.shape[1]), base_len=len(rows), alpha=alpha)
    with torch.no_grad():
        pe.table.copy_(rows)
    return pe


def encode(pe: HierarchicalPE, positions: list[int]) -> torch.Tensor:
    x = torch.zeros(1, len(positions), pe.dims.d_model)
    tokens = torch.zeros(1, len(positions), dtype=torch.long)
    return pe.embed(x, tokens, Positions.from_tensor(torch.tensor(positions)))[0]


def test_hand_computed_positions_of_a_three_row_table():
    # p_0 = (1, 0), p_1 = (0, 1), p_2 = (2, 2); alpha 0.4, so alpha / (1 - alpha) = 2/3 and
    # q_{3i+j} = p_j + 2/3 (p_i - p_0). E.g. q_5 (i=1, j=2): via Su's u-vectors,
    # u_1 = (p_1 - 0.4 p_0) / 0.6 = (-2/3, 5/3), u_2 = (8/3, 10/3), 0.4 u_1 + 0.6 u_2 = (4/3, 8/3)
    pe = with_table([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
    expected = torch.tensor(
        [[1, 0], [2, 2], [1 / 3, 2 / 3], [4 / 3, 8 / 3], [2 / 3, 7 / 3], [8 / 3, 10 / 3]]
    )
    assert torch.allclose(encode(pe, [0, 2, 3, 5, 7, 8]), expected)


@pytest.mark.parametrize("alpha", [0.3, 0.8])
def test_matches_su_formula_written_with_one_based_indices(alpha):
    torch.manual_seed(0)
    n = 4
    pe = HierarchicalPE(dims(16, 3), base_len=n, alpha=alpha)
    p = {i + 1: row for i, row in enumerate(pe.table.detach())}  # p_1..p_n
    u = {i: (p[i] - alpha * p[1]) / (1 - alpha) for i in p}
    q = {(i - 1) * n + j: alpha * u[i] + (1 - alpha) * u[j] for i in p for j in p}  # q_1..q_16
    expected = torch.stack([q[k] for k in range(1, n * n + 1)])
    assert torch.allclose(encode(pe, list(range(n * n))), expected, atol=1e-6)


@pytest.mark.parametrize("alpha", [0.4, 0.7])
def test_positions_below_the_table_size_are_the_table_rows_exactly(alpha):
    torch.manual_seed(1)
    pe = HierarchicalPE(dims(64, 8), base_len=8, alpha=alpha)
    assert torch.equal(encode(pe, list(range(8))), pe.table.detach())


def test_all_n_squared_positions_get_distinct_vectors():
    torch.manual_seed(2)
    pe = HierarchicalPE(dims(36, 4), base_len=6)
    q = encode(pe, list(range(36)))
    distances = torch.cdist(q, q) + torch.eye(36) * 1e9
    assert distances.min() > 1e-3


def test_a_composed_position_trains_its_two_rows_and_the_first_row():
    # q_7 = p_1 + 2/3 (p_2 - p_0): gradients w, 2/3 w, -2/3 w on rows 1, 2, 0
    pe = with_table([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
    w = torch.tensor([[0.5, -1.0]])
    (encode(pe, [7]) * w).sum().backward()
    expected = torch.cat([-2 / 3 * w, w, 2 / 3 * w])
    assert pe.table.grad is not None and torch.allclose(pe.table.grad, expected)


def test_short_sequences_train_only_their_own_rows():
    pe = HierarchicalPE(dims(64, 4), base_len=8)
    encode(pe, [0, 1, 2, 3]).sum().backward()
    assert pe.table.grad is not None
    assert (pe.table.grad[:4] != 0).all() and (pe.table.grad[4:] == 0).all()


def test_table_shape_parameter_count_and_init_follow_pe_learned():
    torch.manual_seed(3)
    pe = HierarchicalPE(dims(66, 64))
    assert pe.table.shape == (32, 64)
    assert sum(p.numel() for p in pe.parameters()) == 32 * 64
    assert pe.table.std().item() == pytest.approx(1.0, abs=0.05)
    small = HierarchicalPE(dims(66, 64), init_std=0.02)
    assert small.table.std().item() == pytest.approx(0.02, abs=0.002)


def test_a_table_whose_square_just_covers_the_run_builds_and_runs_to_its_end():
    pe = HierarchicalPE(dims(64), base_len=8)
    p = pe.table.detach()
    assert torch.allclose(encode(pe, [63])[0], p[7] + 2 / 3 * (p[7] - p[0]))  # i = j = 7


@pytest.mark.parametrize("alpha", [0.5, 0.0, 1.0, -0.2, 1.5])
def test_alpha_outside_zero_one_or_at_one_half_is_refused(alpha):
    with pytest.raises(ConfigError, match=rf"0 < pe.alpha < 1 and pe.alpha != 0.5, got {alpha}"):
        HierarchicalPE(dims(16), base_len=4, alpha=alpha)


def test_a_table_too_small_for_the_run_is_refused_with_the_size_that_fixes_it():
    with pytest.raises(ConfigError, match=r"base_len=8 covers 64 positions.*at least 9"):
        HierarchicalPE(dims(66), base_len=8)


def test_an_empty_table_is_refused():
    with pytest.raises(ConfigError, match=r"base_len \(the table size\) must be >= 1, got 0"):
        HierarchicalPE(dims(1), base_len=0)


def test_positions_beyond_n_squared_are_refused_clearly():
    pe = HierarchicalPE(dims(9), base_len=3)
    with pytest.raises(ConfigError, match=r"positions 0\.\.8 but got position 9.*at least 4"):
        encode(pe, [0, 9])
