"""DAPE (Zheng et al. 2024): the MLP over scores and bias, per pair and across heads."""

import typing

import pytest
import torch
import torch.nn.functional as F

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims
from pelab.pe.dape import DapeBase, DapePE
from pelab.positions import Positions

DIMS = ModelDims(d_model=8, n_heads=2, n_layers=2, causal=True, max_len=16)


def logits_of(pe: DapePE, scores: torch.Tensor, pos: Positions, layer: int) -> torch.Tensor:
    """What attention hands to ``modify_logits``: the scores plus the base's bias."""
    return scores + pe.logit_bias(pos, layer)


def test_each_pair_gets_the_mlp_of_its_scores_and_biases_written_out():
    pe = DapePE(DIMS)
    pos = Positions.contiguous(4)
    scores = torch.randn(1, 2, 4, 4)
    out = pe.modify_logits(logits_of(pe, scores, pos, 1), None, None, pos, 1)
    bias = pe.base.logit_bias(pos, 1)[0]  # [h, i, j]
    (w1, b1), (w2, b2) = ((m.weight, m.bias) for m in (pe.mlps[1][0], pe.mlps[1][2]))
    for i in range(4):
        for j in range(4):
            z = torch.cat((scores[0, :, i, j], bias[:, i, j]))  # [2h]: scores, then B
            f = w2 @ F.leaky_relu(w1 @ z + b1) + b2
            expected = scores[0, :, i, j] + bias[:, i, j] + f
            torch.testing.assert_close(out[0, :, i, j], expected)


def test_a_pair_reads_only_its_own_entries_but_every_head():
    pe = DapePE(DIMS)
    pos = Positions.contiguous(5)
    scores = torch.randn(1, 2, 5, 5)
    changed = scores.clone()
    changed[0, 1, 3, 1] += 2.0  # head 1, pair (3, 1)
    diff = (
        pe.modify_logits(logits_of(pe, scores, pos, 0), None, None, pos, 0)
        - pe.modify_logits(logits_of(pe, changed, pos, 0), None, None, pos, 0)
    ).abs()[0]
    assert (diff[0, 3, 1] > 0) and (diff[1, 3, 1] > 0)  # head 0 sees head 1's score
    diff[:, 3, 1] = 0
    assert (diff == 0).all()  # no other pair moves: a later key cannot reach an earlier query


def test_a_zero_output_layer_leaves_the_base_encoding():
    pe = DapePE(DIMS, base="alibi")
    torch.nn.init.zeros_(pe.mlps[0][2].weight)
    torch.nn.init.zeros_(pe.mlps[0][2].bias)
    pos = Positions.contiguous(4)
    logits = logits_of(pe, torch.randn(1, 2, 4, 4), pos, 0)
    torch.testing.assert_close(pe.modify_logits(logits, None, None, pos, 0), logits)


@pytest.mark.parametrize("base", typing.get_args(DapeBase))
def test_every_base_runs_and_lends_its_shift_class(base):
    pe = DapePE(DIMS, base=base)
    expected = "relative_below_threshold" if base == "fire" else "relative"
    assert pe.shift == expected and pe.needs_eager_attention()
    pos = Positions.contiguous(6)
    assert pe.modify_logits(torch.zeros(1, 2, 6, 6), None, None, pos, 1).isfinite().all()


def test_per_layer_mlps_of_the_configured_width():
    pe = DapePE(DIMS, width=7)
    assert len(pe.mlps) == 2 and pe.mlps[0][0].weight.shape == (7, 4)
    assert pe.mlps[0][2].weight.shape == (2, 7)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"base": "rope"}, "pe.base='rope' is not a choice; valid choices: kerple, alibi, "),
        ({"width": 0}, r"pe.width .* must be >= 1, got 0"),
    ],
)
def test_bad_options_are_refused_with_the_choices(options, message):
    with pytest.raises(ConfigError, match=message):
        DapePE(DIMS, **options)
