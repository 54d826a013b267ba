import math
from functools import partial

import pytest
import torch

from pelab.errors import ConfigError
from pelab.models.transformer import Transformer
from pelab.pe.base import ModelDims
from pelab.pe.shaw import ShawPE, clipped_offset_index
from pelab.positions import Positions
from tests.pe.nets import sharp_net


def dims(causal: bool, head_dim: int = 4, heads: int = 2, layers: int = 2) -> ModelDims:
    return ModelDims(head_dim * heads, heads, layers, causal, max_len=32)


def make_net(causal: bool, **options) -> Transformer:
    return sharp_net(partial(ShawPE, **options), causal, max_len=32)


def naive_logits_and_output(pe, q, k, v, positions, layer, causal):
    """Shaw et al. eqs. 3-5 with one loop per (batch, head, i, j)."""
    b, h, n, d = q.shape
    wk, wv = pe.key_table[layer], pe.value_table[layer]
    logits = torch.empty(b, h, n, n)
    for bi, hi, i, j in torch.cartesian_prod(*map(torch.arange, (b, h, n, n))).tolist():
        offset = positions[bi][j] - positions[bi][i]
        row = min(max(offset, -pe.max_distance), pe.ahead) + pe.max_distance
        logits[bi, hi, i, j] = q[bi, hi, i] @ (k[bi, hi, j] + wk[row]) / math.sqrt(d)
        if causal and j > i:
            logits[bi, hi, i, j] = -math.inf
    probs = logits.softmax(-1)
    out = torch.zeros(b, h, n, d)
    for bi, hi, i, j in torch.cartesian_prod(*map(torch.arange, (b, h, n, n))).tolist():
        offset = positions[bi][j] - positions[bi][i]
        row = min(max(offset, -pe.max_distance), pe.ahead) + pe.max_distance
        out[bi, hi, i] += probs[bi, hi, i, j] * (v[bi, hi, j] + wv[row])
    return logits, out


def hooked_logits_and_output(pe, q, k, v, pos, layer, causal):
    """What the eager attention path computes with the encoding's hooks."""
    logits = pe.modify_logits(q @ k.transpose(-1, -2) * pe.scale, q, k, pos, layer)
    if causal:
        logits = logits.masked_fill(torch.ones(3, 3).triu(1).bool(), -math.inf)
    probs = logits.softmax(-1)
    return logits, pe.modify_output(probs @ v, probs, pos, layer)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("layer", [0, 1])
def test_logits_and_outputs_match_a_loop_over_pairs_on_three_tokens(causal, layer):
    torch.manual_seed(1)
    pe = ShawPE(dims(causal), max_distance=1)  # offset +-2 on three tokens is clipped to +-1
    q, k, v = torch.randn(3, 1, 2, 3, 4).unbind()
    positions = [[0, 1, 2]]
    expected = naive_logits_and_output(pe, q, k, v, positions, layer, causal)
    got = hooked_logits_and_output(
        pe, q, k, v, Positions.from_tensor(torch.tensor(positions)), layer, causal
    )
    assert torch.allclose(got[0], expected[0], atol=1e-6)
    assert torch.allclose(got[1], expected[1], atol=1e-6)


def test_positions_that_differ_per_batch_row_use_each_rows_offsets():
    torch.manual_seed(2)
    pe = ShawPE(dims(causal=False), max_distance=2)
    q, k, v = torch.randn(3, 2, 2, 3, 4).unbind()
    positions = [[0, 1, 2], [5, 9, 10]]  # row 2 has offsets 4 (clipped to 2) and 1
    expected = naive_logits_and_output(pe, q, k, v, positions, 0, causal=False)
    got = hooked_logits_and_output(
        pe, q, k, v, Positions.from_tensor(torch.tensor(positions)), 0, causal=False
    )
    assert torch.allclose(got[0], expected[0], atol=1e-6)
    assert torch.allclose(got[1], expected[1], atol=1e-6)
    assert not torch.allclose(got[1][0], got[1][1], atol=1e-3)


def test_key_term_at_hand_computed_values():
    # head_dim 1 (scale 1), k = 1: w^K for offsets -1, 0, +1 is -1, 0, 2; q = 1, 2, 3
    pe = ShawPE(ModelDims(1, 1, 1, False, 8), max_distance=1)
    with torch.no_grad():
        pe.key_table.copy_(torch.tensor([-1.0, 0.0, 2.0]).view(1, 3, 1))
    q = torch.tensor([1.0, 2.0, 3.0]).view(1, 1, 3, 1)
    logits = pe.modify_logits(torch.zeros(1, 1, 3, 3), q, q, Positions.contiguous(3), 0)
    expected = torch.tensor([[0.0, 2.0, 2.0], [-2.0, 0.0, 4.0], [-3.0, -3.0, 0.0]])
    assert torch.equal(logits[0, 0], expected)


def test_value_term_adds_the_probability_weighted_value_vectors():
    # attention from query 0 split 1/4, 1/4, 1/2 over offsets 0, +1, +2 (clipped to +1)
    pe = ShawPE(ModelDims(2, 1, 1, False, 8), max_distance=1)
    with torch.no_grad():
        pe.value_table.copy_(torch.tensor([[[9.0, 9.0], [1.0, 0.0], [0.0, 1.0]]]))
    probs = torch.tensor([0.25, 0.25, 0.5]).expand(1, 1, 3, 3)
    out = pe.modify_output(torch.zeros(1, 1, 3, 2), probs, Positions.contiguous(3), 0)
    assert torch.equal(out[0, 0, 0], torch.tensor([0.25, 0.75]))  # w_0 / 4 + w_+1 * 3/4


def test_rows_clip_offsets_and_decoder_keeps_no_row_for_later_keys():
    pos = Positions.contiguous(4)
    encoder = clipped_offset_index(pos, behind=2, ahead=2)[0]
    assert encoder.tolist() == [[2, 3, 4, 4], [1, 2, 3, 4], [0, 1, 2, 3], [0, 0, 1, 2]]
    decoder = clipped_offset_index(pos, behind=2, ahead=0)[0]
    assert decoder.tril().tolist() == [[2, 0, 0, 0], [1, 2, 0, 0], [0, 1, 2, 0], [0, 0, 1, 2]]


@pytest.mark.parametrize("causal", [True, False])
def test_model_outputs_are_invariant_to_shifting_all_positions(causal):
    net = make_net(causal, max_distance=3)  # 9 tokens: most pairs use the clipped vectors
    tokens = torch.randint(0, 12, (2, 9))
    base = torch.arange(9)
    assert torch.allclose(net(tokens, base), net(tokens, base + 13), atol=1e-4)
    assert not torch.allclose(net(tokens, base), net(tokens, base * 2), atol=1e-3)


def test_tables_are_per_layer_shared_by_heads_and_sized_by_the_clip():
    encoder = ShawPE(ModelDims(d_model=16, n_heads=4, n_layers=3, causal=False, max_len=64))
    assert encoder.key_table.shape == encoder.value_table.shape == (3, 2 * 16 + 1, 4)
    decoder = ShawPE(ModelDims(16, 4, 3, True, 64), max_distance=5)
    assert decoder.key_table.shape == (3, 5 + 1, 4)
    assert sum(p.numel() for p in decoder.parameters()) == 2 * 3 * 6 * 4


def test_tables_start_xavier_uniform_per_layer():
    pe = ShawPE(ModelDims(64, 1, 2, False, 8), max_distance=16)  # rows 33, head_dim 64
    bound = math.sqrt(6 / (33 + 64))
    for table in (*pe.key_table, *pe.value_table):
        assert table.abs().max() <= bound and table.abs().max() > 0.9 * bound
    assert not torch.equal(pe.key_table[0], pe.key_table[1])


@pytest.mark.parametrize("bad", [-1, 2.5, True])
def test_bad_clipping_distance_is_refused_with_the_value(bad):
    with pytest.raises(ConfigError, match=rf"max_distance.*>= 0, got {bad!r}"):
        ShawPE(dims(True), max_distance=bad)


def test_zero_clipping_distance_is_the_papers_k0_ablation_without_positions():
    # k = 0: one key and one value vector for every pair, so an encoder is permutation-equivariant
    net = make_net(causal=False, max_distance=0)
    tokens = torch.tensor([[3, 4, 5, 6]])
    perm = torch.tensor([3, 1, 0, 2])
    assert torch.allclose(net(tokens)[:, perm], net(tokens[:, perm]), atol=1e-5)
