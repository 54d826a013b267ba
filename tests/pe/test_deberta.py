import math
from functools import partial

import pytest
import torch

from pelab.errors import ConfigError
from pelab.models.transformer import Transformer
from pelab.pe.base import ModelDims
from pelab.pe.deberta import DebertaPE, log_bucket
from pelab.positions import Positions
from tests.pe.nets import sharp_net


def dims(causal: bool, head_dim: int = 4, heads: int = 2, layers: int = 2) -> ModelDims:
    return ModelDims(head_dim * heads, heads, layers, causal, max_len=32)


def make_net(causal: bool, **options) -> Transformer:
    return sharp_net(partial(DebertaPE, **options), causal)


def naive_logits(pe, q, k, positions, layer):
    """Eqs. 2-4 of the paper with one loop per (batch, head, i, j) and explicit row lookups;
    with ``p2c: reference`` the p2c row is ``delta(i, j)``, as HF's code reads it."""
    b, h, n, d = q.shape
    k_r = (pe.rel_embeddings @ pe.w_k_r[layer].T).view(-1, h, d)  # [2k, h, d]
    q_r = (pe.rel_embeddings @ pe.w_q_r[layer].T).view(-1, h, d)
    span = pe.span

    def row(a, c):  # delta(a, c) from the paper's eq. 3 on the bucketed distance a - c
        bucket = log_bucket(torch.tensor(a - c), pe.position_buckets, pe.max_relative_positions)
        return min(max(int(bucket) + span, 0), 2 * span - 1)

    logits = torch.empty(b, h, n, n)
    for bi, hi, i, j in torch.cartesian_prod(*map(torch.arange, (b, h, n, n))).tolist():
        pi, pj = positions[bi][i], positions[bi][j]
        c2c = q[bi, hi, i] @ k[bi, hi, j]
        c2p = q[bi, hi, i] @ k_r[row(pi, pj), hi]
        p2c_row = row(pi, pj) if pe.p2c == "reference" else row(pj, pi)
        p2c = k[bi, hi, j] @ q_r[p2c_row, hi]
        logits[bi, hi, i, j] = (c2c + c2p + p2c) / math.sqrt(3 * d)
    return logits


def hooked_logits(pe, q, k, positions, layer):
    """What the eager attention path hands the hook (q.k / sqrt(d)) and gets back."""
    scaled = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return pe.modify_logits(scaled, q, k, Positions.from_tensor(torch.tensor(positions)), layer)


@pytest.mark.parametrize("layer", [0, 1])
@pytest.mark.parametrize(
    ("buckets", "max_rel"),
    [(4, 4), (0, 2)],  # log buckets; plain clipping at k = 2
)
def test_logits_match_a_loop_over_pairs_on_four_tokens(layer, buckets, max_rel):
    torch.manual_seed(1)
    pe = DebertaPE(dims(causal=False), position_buckets=buckets, max_relative_positions=max_rel)
    q, k = torch.randn(2, 1, 2, 4, 4).unbind()
    positions = [[0, 1, 2, 3]]  # distances up to +-3: beyond the exact span and the clip
    expected = naive_logits(pe, q, k, positions, layer)
    assert torch.allclose(hooked_logits(pe, q, k, positions, layer), expected, atol=1e-5)


def test_positions_that_differ_per_batch_row_use_each_rows_distances():
    torch.manual_seed(2)
    pe = DebertaPE(dims(causal=True), position_buckets=4, max_relative_positions=8)
    q, k = torch.randn(2, 2, 2, 4, 4).unbind()
    positions = [[0, 1, 2, 3], [3, 9, 10, 30]]
    expected = naive_logits(pe, q, k, positions, 0)
    assert torch.allclose(hooked_logits(pe, q, k, positions, 0), expected, atol=1e-5)


def test_c2p_and_p2c_read_rows_with_opposite_signs():
    # head_dim 1, one head, k = 2 (rows for i - j = -2, -1, 0, 1): P = row index, W = 1
    pe = DebertaPE(ModelDims(1, 1, 1, False, 8), position_buckets=0, max_relative_positions=2)
    with torch.no_grad():
        pe.rel_embeddings.copy_(torch.arange(4.0).view(4, 1))
        pe.w_q_r.fill_(1.0)
        pe.w_k_r.fill_(10.0)  # K_r[r] = 10 r, Q_r[r] = r
    q = torch.tensor([1.0, 0.0]).view(1, 1, 2, 1)  # only query 0 has content
    k = torch.tensor([0.0, 1.0]).view(1, 1, 2, 1)  # only key 1 has content
    logits = pe.modify_logits(torch.zeros(1, 1, 2, 2), q, k, Positions.contiguous(2), 0)
    # c2p (query 0): q_0 . K_r[delta(0, j)], delta(0, 0) = 2, delta(0, 1) = 1 -> 20, 10
    # p2c (key 1):  k_1 . Q_r[delta(1, i)], delta(1, 0) = 3, delta(1, 1) = 2 -> 3, 2
    expected = torch.tensor([[20.0, 10.0 + 3.0], [0.0, 2.0]]) / math.sqrt(3)
    assert torch.allclose(logits[0, 0], expected)


@pytest.mark.parametrize("buckets", [4, 0])
def test_the_reference_p2c_reads_the_mirrored_row_and_matches_a_loop(buckets):
    torch.manual_seed(3)
    options = dict(position_buckets=buckets, max_relative_positions=4)
    paper = DebertaPE(dims(causal=False), **options)
    reference = DebertaPE(dims(causal=False), **options, p2c="reference")
    reference.load_state_dict(paper.state_dict())
    q, k = torch.randn(2, 1, 2, 5, 4).unbind()
    positions = [[0, 1, 2, 3, 7]]
    expected = naive_logits(reference, q, k, positions, 0)
    assert torch.allclose(hooked_logits(reference, q, k, positions, 0), expected, atol=1e-5)
    assert not torch.allclose(hooked_logits(paper, q, k, positions, 0), expected, atol=1e-3)
    c2p, p2c = reference.rows(Positions.from_tensor(torch.tensor(positions)))
    assert torch.equal(c2p, p2c)


def test_an_unknown_p2c_convention_is_refused():
    with pytest.raises(ConfigError, match="pe.p2c='hf' is not a choice; .*: paper, reference"):
        DebertaPE(dims(causal=False), p2c="hf")


def test_content_logits_are_rescaled_to_one_over_sqrt_3d():
    pe = DebertaPE(dims(causal=False))
    with torch.no_grad():
        pe.rel_embeddings.zero_()  # no position terms: only c2c remains
    q, k = torch.randn(2, 1, 2, 5, 4).unbind()
    scaled = q @ k.transpose(-1, -2) / 2.0  # attention's q.k / sqrt(4)
    logits = pe.modify_logits(scaled, q, k, Positions.contiguous(5), 0)
    assert torch.allclose(logits, q @ k.transpose(-1, -2) / math.sqrt(12))


def test_log_buckets_at_hand_computed_values():
    # buckets 8 (mid 4), max 16: exact for |r| <= 4, then 4 + ceil(3 log(|r|/4) / log(15/4))
    r = torch.tensor([0, 1, 4, 5, 6, 7, 9, 10, 15, 16, 100])
    expected = torch.tensor([0, 1, 4, 5, 5, 6, 6, 7, 7, 8, 12])
    assert torch.equal(log_bucket(r, 8, 16), expected)
    assert torch.equal(log_bucket(-r, 8, 16), -expected)  # symmetric
    # the defaults: exact within +-16, max_relative_positions - 1 = 63 is the last bucket, 31
    defaults = log_bucket(torch.tensor([16, 17, 20, 32, 63, 64, 1000]), 32, 64)
    assert defaults.tolist() == [16, 17, 19, 24, 31, 32, 62]
    assert torch.equal(log_bucket(r, 0, 16), r)  # position_buckets: 0 -> no bucketing


def test_rows_clip_buckets_into_the_table_as_eq_3():
    pe = DebertaPE(dims(causal=False), position_buckets=4, max_relative_positions=8)  # k = 4
    pos = Positions(torch.tensor([[0]]), torch.tensor([[0, 1, 2, 3, 7, 100, -2, -3, -7, -100]]))
    # i - j = 0, -1, -2 exact; -3 and -7 share log bucket -3; -100 is bucket -6; and mirrored
    c2p, p2c = pe.rows(pos)
    assert c2p[0, 0].tolist() == [4, 3, 2, 1, 1, 0, 6, 7, 7, 7]  # bucket + k, clipped to 0..7
    assert p2c[0, 0].tolist() == [4, 5, 6, 7, 7, 7, 2, 1, 1, 0]  # k - bucket: delta(j, i)


@pytest.mark.parametrize("causal", [True, False])
def test_model_outputs_are_invariant_to_shifting_all_positions(causal):
    net = make_net(causal, position_buckets=4, max_relative_positions=6)  # 9 tokens: log region
    tokens = torch.randint(0, 12, (2, 9))
    base = torch.arange(9)
    assert torch.allclose(net(tokens, base), net(tokens, base + 13), atol=1e-4)
    assert not torch.allclose(net(tokens, base), net(tokens, base * 2), atol=1e-3)


def test_parameters_shared_embeddings_and_per_layer_projections():
    pe = DebertaPE(ModelDims(d_model=16, n_heads=4, n_layers=3, causal=False, max_len=64))
    assert pe.rel_embeddings.shape == (2 * 32, 16)
    assert pe.w_q_r.shape == pe.w_k_r.shape == (3, 16, 16)
    assert sum(p.numel() for p in pe.parameters()) == 64 * 16 + 2 * 3 * 16 * 16
    clip = DebertaPE(ModelDims(8, 2, 1, True, 64), position_buckets=0, max_relative_positions=5)
    assert clip.rel_embeddings.shape == (10, 8)


def test_parameters_start_normal_with_std_002():
    pe = DebertaPE(ModelDims(64, 4, 2, False, 64))
    for p in (pe.rel_embeddings, pe.w_q_r, pe.w_k_r):
        assert abs(p.std().item() - 0.02) < 0.002 and abs(p.mean().item()) < 0.002
    assert not torch.equal(pe.w_q_r[0], pe.w_q_r[1])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"position_buckets": -2}, r"position_buckets.*>= 0, got -2"),
        ({"position_buckets": 2.5}, r"position_buckets.*>= 0, got 2.5"),
        ({"max_relative_positions": True}, r"max_relative_positions.*>= 0, got True"),
        ({"position_buckets": 7}, r"position_buckets.*0 \(no log buckets\) or an even .*got 7"),
        ({"position_buckets": 2}, r"even integer >= 4, got 2"),
        ({"position_buckets": 32, "max_relative_positions": 20}, r"max_relative_positions=20"),
        ({"position_buckets": 0, "max_relative_positions": 0}, r"clipping distance.*>= 1"),
    ],
)
def test_bad_bucket_settings_are_refused_with_the_value(options, message):
    with pytest.raises(ConfigError, match=message):
        DebertaPE(dims(causal=False), **options)
