from functools import partial

import pytest
import torch

from pelab.errors import ConfigError
from pelab.models.transformer import Transformer
from pelab.pe.base import ModelDims
from pelab.pe.cope import CoPE
from pelab.positions import Positions
from tests.pe.nets import sharp_net

ON, OFF = 100.0, -100.0  # q . k of a key that counts (gate sigmoid(100) = 1) or not (~ 0)


def dims(causal: bool, head_dim: int = 1, heads: int = 1, layers: int = 2) -> ModelDims:
    return ModelDims(head_dim * heads, heads, layers, causal, max_len=32)


def gated_qk(products: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """Head dim 1, every query 1: ``q_i . k_t = products[t]`` for all queries. ``[1, 1, n, 1]``."""
    k = torch.tensor(products).view(1, 1, -1, 1)
    return torch.ones_like(k), k


def make_net(causal: bool, **options) -> Transformer:
    return sharp_net(partial(CoPE, **options), causal, max_len=32)


def test_positions_count_only_the_gated_keys_from_the_key_up_to_the_query():
    # keys 0 and 2 count, key 1 does not: p_ij = number of counted keys t with j <= t <= i
    pe = CoPE(dims(causal=True))
    positions, first_row = pe.contextual_positions(*gated_qk([ON, OFF, ON]))
    expected = torch.tensor([[1.0, 0, 0], [1, 0, 0], [2, 1, 1]])  # above the diagonal: no count
    assert torch.equal(positions[0, 0], expected)
    assert torch.equal(first_row, torch.zeros(3, 3, dtype=torch.long))


def test_encoder_counts_keys_after_the_query_forward_into_a_second_table():
    pe = CoPE(dims(causal=False), npos_max=8)
    positions, first_row = pe.contextual_positions(*gated_qk([ON, OFF, ON]))
    # below and on the diagonal as in a decoder; above it p_ij = sum_{t=i..j} g_it
    expected = torch.tensor([[1.0, 1, 2], [1, 0, 1], [2, 1, 1]])
    assert torch.equal(positions[0, 0], expected)
    assert torch.equal(first_row, torch.tensor([[0, 8, 8], [0, 0, 8], [0, 0, 0]]))


def test_gates_of_future_keys_count_for_nothing():
    pe = CoPE(dims(causal=True, head_dim=4))
    q, k = torch.randn(2, 1, 2, 5, 4).unbind()
    changed = k.clone()
    changed[..., 3:, :] += 5.0
    a, _ = pe.contextual_positions(q, k)
    b, _ = pe.contextual_positions(q, changed)
    assert torch.equal(a[..., :3, :], b[..., :3, :])  # queries before the change see the same


def test_logits_interpolate_between_the_scores_of_floor_and_ceil_positions():
    # q . k = 0 everywhere: every gate is 1/2, so p_ij = (i - j + 1) / 2. With e[p] = (p^2, 0)
    # and q = (1, 0), q . e[p] = p^2 at integers; p = 1.5 gives 0.5 * 2^2 + 0.5 * 1^2 = 2.5.
    pe = CoPE(dims(causal=True, head_dim=2))
    with torch.no_grad():
        pe.embeddings[1, :, 0] = torch.arange(64.0) ** 2
    q = torch.tensor([1.0, 0.0]).expand(1, 1, 3, 2)
    k = torch.tensor([0.0, 1.0]).expand(1, 1, 3, 2)
    logits = pe.modify_logits(torch.zeros(1, 1, 3, 3), q, k, Positions.contiguous(3), layer=1)
    assert torch.allclose(logits[0, 0, 2], torch.tensor([2.5, 1.0, 0.5]))
    assert torch.allclose(logits[0, 0, 1, :2], torch.tensor([1.0, 0.5]))
    assert torch.allclose(logits[0, 0, 0, 0], torch.tensor(0.5))
    # layer 0 has its own (still zero) table: nothing is added
    untouched = pe.modify_logits(torch.zeros(1, 1, 3, 3), q, k, Positions.contiguous(3), 0)
    assert torch.equal(untouched, torch.zeros(1, 1, 3, 3))


def test_integer_positions_use_one_embedding_and_add_to_the_given_logits():
    pe = CoPE(dims(causal=True))
    with torch.no_grad():
        pe.embeddings[0, :, 0] = torch.arange(64.0) * 10 + 1  # q . e[p] = 10 p + 1 for q = 1
    q, k = gated_qk([ON, OFF, ON])
    logits = pe.modify_logits(torch.full((1, 1, 3, 3), 7.0), q, k, Positions.contiguous(3), 0)
    counts = torch.tensor([[1.0, 0, 0], [1, 0, 0], [2, 1, 1]])
    assert torch.allclose(logits[0, 0], 7 + 10 * counts + 1)


def test_positions_are_clamped_to_npos_max_minus_one():
    pe = CoPE(dims(causal=True), npos_max=3)
    with torch.no_grad():
        pe.embeddings[0, :, 0] = torch.tensor([0.0, 1.0, 2.0])
    q, k = gated_qk([ON] * 5)  # every key counts: p_ij = i - j + 1, clamped to 2
    positions, _ = pe.contextual_positions(q, k)
    assert torch.equal(
        positions[0, 0],
        (torch.arange(5)[:, None] - torch.arange(5) + 1).clamp(0, 2).tril().float(),
    )
    logits = pe.modify_logits(torch.zeros(1, 1, 5, 5), q, k, Positions.contiguous(5), 0)
    assert torch.equal(logits[0, 0, 4, :4], torch.tensor([2.0, 2.0, 2.0, 2.0]))


def test_parameters_are_one_zero_table_per_layer_shared_by_heads():
    decoder = CoPE(dims(causal=True, head_dim=4, heads=3, layers=2), npos_max=10)
    encoder = CoPE(dims(causal=False, head_dim=4, heads=3, layers=2), npos_max=10)
    assert decoder.embeddings.shape == (2, 10, 4)
    assert encoder.embeddings.shape == (2, 20, 4)  # a second table for keys after the query
    assert sum(p.numel() for p in decoder.parameters()) == 80
    assert torch.equal(decoder.embeddings, torch.zeros(2, 10, 4))  # paper's code: zeros


@pytest.mark.parametrize("causal", [True, False])
def test_model_is_invariant_to_shifting_positions(causal):
    net = make_net(causal)
    tokens = torch.randint(0, 12, (2, 9))
    assert torch.allclose(net(tokens, torch.arange(9)), net(tokens, torch.arange(9) + 13))


@pytest.mark.parametrize("bad", [0, -3, 2.5, "8", True])
def test_bad_npos_max_is_refused_with_the_option_name(bad):
    with pytest.raises(ConfigError, match=r"pe\.npos_max .* got"):
        CoPE(dims(causal=True), npos_max=bad)
