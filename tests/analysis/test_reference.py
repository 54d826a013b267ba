"""Rows against a fixed reference row (``make_table.py --reference``): Welch's test at the
planned looks, Holm over the declared family, the seeds that would decide, checked against
scipy by hand; the interval agrees with the verdict in every written form."""

import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from pelab.analysis import reference, reference_tables
from pelab.analysis.frames import lengths_frame, runs_frame
from pelab.analysis.sequential import LOOKS, sequential_test, shares, verdicts, welch_difference
from pelab.analysis.table import ablation
from pelab.errors import ConfigError
from tests.analysis.records import record

# out of distribution (length 32), three seeds each: a far above rope, b near it, rope steady
OOD = {"rope": (0.10, 0.11, 0.12), "a": (0.50, 0.55, 0.60), "b": (0.13, 0.16, 0.19)}
RECORDS = [
    record(pe, "copy", seed, {8: 1.0, 32: value}, train=(1, 8), chance=0.0)
    for pe, values in OOD.items()
    for seed, value in enumerate(values)
]


def compared(compare=None):
    result = ablation(runs_frame(RECORDS), lengths_frame(RECORDS))
    wanted = reference.parse_reference("pe=rope", result.rows, result.by_task)
    family, _ = reference.compared_rows(result.by_task, result.rows, wanted, compare)
    table = reference.versus(result.by_task, result.rows, wanted, family)
    ood = table[(table["split"] == "OOD") & (table["metric"] == "exact_match")]
    return table, ood.set_index("pe")


def test_each_row_is_compared_with_the_reference_by_welch_at_the_first_look_and_holm():
    """Three seeds: the first look, whose p counts over its share of alpha; Holm over the
    column's two comparisons (a and b vs rope)."""
    _, ood = compared()
    assert ood.loc["rope", "reference"] and np.isnan(ood.loc["rope", "diff"])
    share = shares(LOOKS)[0]
    raw = {
        pe: min(1.0, scipy_stats.ttest_ind(OOD[pe], OOD["rope"], equal_var=False).pvalue / share)
        for pe in "ab"
    }
    assert raw["a"] < raw["b"]
    holm = {"a": min(1.0, 2 * raw["a"]), "b": min(1.0, max(2 * raw["a"], raw["b"]))}
    for pe in "ab":
        assert ood.loc[pe, "p_holm"] == pytest.approx(holm[pe])
        assert ood.loc[pe, "diff"] == pytest.approx(np.mean(OOD[pe]) - np.mean(OOD["rope"]))
        assert ood.loc[pe, "family"] == 2 and ood.loc[pe, "seeds"] == 3
    assert ood.loc["a", "decided"] and not ood.loc["b", "decided"]
    assert np.isnan(ood.loc["a", "seeds_to_decide"]) and ood.loc["b", "seeds_to_decide"] >= 5
    # a, decided at Holm's first step: its interval is Welch's at 1 - (alpha/2) x share
    test = scipy_stats.ttest_ind(OOD["a"], OOD["rope"], equal_var=False)
    level = 0.05 / 2 * share
    interval = test.confidence_interval(confidence_level=1 - level)
    assert (ood.loc["a", "low"], ood.loc["a", "high"]) == pytest.approx(interval)
    assert ood.loc["a", "confidence"] == pytest.approx(1 - level)
    assert reference_tables.comparison_text(ood.loc["a"]).endswith("(Holm over 2) ✓")
    assert "seeds decide" in reference_tables.comparison_text(ood.loc["b"])


def test_a_declared_family_adjusts_over_its_own_comparisons_only():
    """``--compare pe=a``: one comparison per column, a's p over its share alone (no Holm
    factor), and b is not in the table at all."""
    _, ood = compared("pe=a")
    assert set(ood.index) == {"a", "rope"} and ood.loc["a", "family"] == 1
    raw = scipy_stats.ttest_ind(OOD["a"], OOD["rope"], equal_var=False).pvalue
    assert ood.loc["a", "p_holm"] == pytest.approx(raw / shares(LOOKS)[0])


def test_the_table_is_written_with_its_family_and_count_of_decided_comparisons(tmp_path):
    table, _ = compared()
    rows = ["pe"]
    written = reference_tables.write(
        table, rows, {"pe": "rope"}, "exact_match", tmp_path, "every row"
    )
    text = written[0].read_text()
    assert "| rope | reference | reference |" in re.sub(" +", " ", text)
    assert "1 of 4 comparisons decided" in text  # a and b, ID and OOD; only a OOD decides
    assert "The family, per column: every row vs the reference" in text
    assert [p.suffix for p in written] == [".md", ".tex", ".csv"]
    assert written[1].read_text().startswith("% needs \\usepackage{booktabs,graphicx}")
    assert len(pd.read_csv(written[2])) == len(table)


def test_a_reference_row_the_table_lacks_or_cannot_single_out_is_refused():
    result = ablation(runs_frame(RECORDS), lengths_frame(RECORDS))
    with pytest.raises(ConfigError, match="no such row; the table has pe=a, pe=b, pe=rope"):
        reference.parse_reference("pe=xpos", result.rows, result.by_task)
    with pytest.raises(ConfigError, match="over the table's row settings pe"):
        reference.parse_reference("lr=3", result.rows, result.by_task)
    with pytest.raises(ConfigError, match="name one row"):
        reference.parse_reference("pe=rope,a", result.rows, result.by_task)
    with pytest.raises(ConfigError, match="--compare pe=xpos: no such row"):
        reference.compared_rows(result.by_task, result.rows, {"pe": "rope"}, "pe=xpos")
    twice = [*RECORDS, *(dict(r, overrides=["model.net.d_model=32"]) for r in RECORDS)]
    wide = ablation(runs_frame(twice), lengths_frame(twice))
    with pytest.raises(ConfigError, match="matches 2 rows .* add the setting that tells them"):
        reference.parse_reference("pe=rope", wide.rows, wide.by_task)


@pytest.mark.parametrize(
    "value, text", [(0.123, "+12.3"), (-0.0004, "-0.04"), (0.0, "+0.0"), (-0.25, "-25.0")]
)
def test_a_bound_near_zero_keeps_its_sign_and_digits(value, text):
    assert reference_tables.points(value) == text


def test_a_look_compares_the_first_seeds_never_a_later_one_in_place_of_a_missing_one():
    """Seed 1 of a still running: seeds 0, 2, 3 have results, but look 1 needs seeds 0-2, so it
    is not reached (no test) until seed 1 ends; then the look compares seeds 0-2 exactly."""
    rope, a = (0.10, 0.11, 0.12, 0.11), (0.50, np.nan, 0.60, 0.58)
    assert sequential_test(a, rope) is None
    done = sequential_test((0.50, 0.55, 0.60, 0.58), rope)
    assert done.p_values[0] == pytest.approx(
        scipy_stats.ttest_ind((0.50, 0.55, 0.60), rope[:3], equal_var=False).pvalue
    )


def test_a_declared_family_keeps_its_size_while_a_member_waits_for_its_seeds():
    """Holm over the declared members: one short of the first look counts as p = 1, so the
    other's adjustment does not change when that member's seeds arrive later."""
    tests = {"a": sequential_test((0.50, 0.55, 0.60), OOD["rope"]), "b": None}
    verdict = verdicts(tests)
    assert set(verdict) == {"a"} and verdict["a"].m == 2
    assert verdict["a"].p_adjusted == pytest.approx(min(1.0, 2 * tests["a"].p))


def test_float_noise_is_no_difference():
    """0.1 + 0.2 against 0.3 on every seed: the same score, p = 1, not a difference without
    spread (p = 0)."""
    difference = welch_difference([0.1 + 0.2] * 3, [0.3] * 3)
    assert difference.p_value == 1.0 and difference.diff == 0.0
