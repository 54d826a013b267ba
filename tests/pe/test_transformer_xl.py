import math
from functools import partial

import pytest
import torch

from pelab.errors import ConfigError
from pelab.models.transformer import Transformer
from pelab.pe.absolute import sinusoid_table
from pelab.pe.base import ModelDims
from pelab.pe.transformer_xl import TransformerXLPE, rel_shift
from pelab.positions import Positions
from tests.pe.nets import sharp_net


def dims(causal: bool, head_dim: int = 4, heads: int = 2, layers: int = 2) -> ModelDims:
    return ModelDims(head_dim * heads, heads, layers, causal, max_len=32)


def make_net(causal: bool) -> Transformer:
    return sharp_net(partial(TransformerXLPE), causal, max_len=32)


def random_pe(causal: bool) -> TransformerXLPE:
    torch.manual_seed(1)
    pe = TransformerXLPE(dims(causal))
    for p in pe.parameters():
        torch.nn.init.normal_(p)
    return pe


def naive_logits(pe, q, k, positions, layer):
    """Dai et al. 2019, section 3.3, one (batch, head, i, j) at a time:
    ``[(q_i + u) . k_j + (q_i + v) . W_R R_{i-j}] / sqrt(d)``."""
    b, h, n, d = q.shape
    logits = torch.empty(b, h, n, n)
    for bi, hi, i, j in torch.cartesian_prod(*map(torch.arange, (b, h, n, n))).tolist():
        distance = positions[bi % len(positions)][i] - positions[bi % len(positions)][j]
        sinusoid = sinusoid_table(torch.tensor(distance), h * d, layout="concat")  # [d_model]
        r = (pe.w_r[layer] @ sinusoid).view(h, d)[hi]
        content = (q[bi, hi, i] + pe.content_bias[hi]) @ k[bi, hi, j]
        position = (q[bi, hi, i] + pe.position_bias[hi]) @ r
        logits[bi, hi, i, j] = (content + position) / math.sqrt(d)
    return logits


def hooked_logits(pe, q, k, pos, layer):
    return pe.modify_logits(q @ k.transpose(-1, -2) * pe.scale, q, k, pos, layer)


def test_rel_shift_moves_the_score_of_distance_i_minus_j_into_place():
    # column m of the input holds distance n - 1 - m; here scores[i, m] = 10 i + m
    n, length = 3, 5
    scores = 10 * torch.arange(n)[:, None] + torch.arange(length)
    expected = 10 * torch.arange(n)[:, None] + (n - 1 - torch.arange(n)[:, None] + torch.arange(n))
    assert torch.equal(rel_shift(scores.float()), expected.float())
    assert torch.equal(rel_shift(torch.tensor([[4.0]])), torch.tensor([[4.0]]))  # one token


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("layer", [0, 1])
def test_contiguous_positions_match_a_loop_over_pairs(causal, layer):
    pe = random_pe(causal)
    q, k = torch.randn(2, 2, 2, 4, 4).unbind()
    got = hooked_logits(pe, q, k, Positions.contiguous(4, offset=5), layer)
    expected = naive_logits(pe, q, k, [list(range(5, 9))], layer)
    keep = torch.ones(4, 4).tril().bool() if causal else torch.ones(4, 4).bool()
    assert torch.allclose(got[..., keep], expected[..., keep], atol=1e-5)


@pytest.mark.parametrize("causal", [True, False])
def test_arbitrary_positions_per_batch_row_match_a_loop_over_pairs(causal):
    pe = random_pe(causal)
    q, k = torch.randn(2, 2, 2, 4, 4).unbind()
    positions = [[0, 3, 4, 9], [2, 5, 6, 7]]  # gaps, and another offset per row
    got = hooked_logits(pe, q, k, Positions.from_tensor(torch.tensor(positions)), layer=1)
    expected = naive_logits(pe, q, k, positions, layer=1)
    keep = torch.ones(4, 4).tril().bool() if causal else torch.ones(4, 4).bool()
    assert torch.allclose(got[..., keep], expected[..., keep], atol=1e-5)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n", [1, 2, 7])
def test_relative_shift_and_direct_gather_agree(causal, n):
    pe = random_pe(causal)
    query = torch.randn(3, 2, n, 4)
    shifted = pe.position_scores(query, pe.contiguous_sinusoids(n, query.device), None, 0)
    pos = Positions.contiguous(n, offset=11)
    sinusoids, column = pe.gathered_sinusoids(pos.delta())
    assert len(sinusoids) == 2 * n - 1  # every distance of a pair, masked ones included
    gathered = pe.position_scores(query, sinusoids, column, 0)
    keep = torch.ones(n, n).tril().bool() if causal else torch.ones(n, n).bool()
    assert torch.allclose(shifted[..., keep], gathered[..., keep], atol=1e-5)


def test_the_shift_is_used_for_contiguous_positions_and_the_gather_otherwise():
    pe = random_pe(causal=False)
    offsets = torch.arange(5) + torch.tensor([[0], [40]])  # contiguous, another offset per row
    assert pe.sinusoids(Positions.from_tensor(offsets), 5, 5)[1] is None
    gapped = Positions.from_tensor(torch.tensor([0, 2, 3, 4, 5]))
    sinusoids, column = pe.sinusoids(gapped, 5, 5)
    assert column.shape == (1, 5, 5) and len(sinusoids) == len(column.unique())


@pytest.mark.parametrize("causal", [True, False])
def test_model_is_invariant_to_shifting_positions_contiguous_or_not(causal):
    net = make_net(causal)
    tokens = torch.randint(0, 12, (2, 9))
    base = torch.arange(9)
    assert torch.allclose(net(tokens, base), net(tokens, base + 13), atol=1e-4)
    gapped = torch.tensor([0, 1, 3, 4, 8, 9, 10, 15, 16])  # the direct-gather path
    assert torch.allclose(net(tokens, gapped), net(tokens, gapped + 13), atol=1e-4)
    assert not torch.allclose(net(tokens, base), net(tokens, gapped), atol=1e-3)


def test_parameter_counts_u_and_v_per_head_and_w_r_per_layer():
    pe = TransformerXLPE(dims(causal=True, head_dim=4, heads=2, layers=3))
    assert pe.content_bias.shape == pe.position_bias.shape == (2, 4)
    assert pe.w_r.shape == (3, 8, 8)  # d_model -> h * d, one per layer
    assert sum(p.numel() for p in pe.parameters()) == 3 * 8 * 8 + 2 * 2 * 4
    assert 0.01 < pe.w_r.std() < 0.03  # ~ N(0, 0.02) as in the authors' code


def test_odd_d_model_and_bad_base_are_refused():
    with pytest.raises(ConfigError, match=r"even model\.net\.d_model, got 15"):
        TransformerXLPE(ModelDims(15, 3, 1, True, 16))
    with pytest.raises(ConfigError, match=r"pe\.base .* got 1"):
        TransformerXLPE(dims(causal=True), base=1)
