"""What a column cannot tell yet (issue 44): the smallest difference its seeds could detect, and
the seeds per cell that would decide an undecided comparison with the best. The power behind
both (``power.welch_power``, the noncentral t) is checked against a simulation of Welch's
test itself."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from pelab.analysis import sequential
from pelab.analysis.cells import decide_text, pivot
from pelab.analysis.frames import lengths_frame, runs_frame
from pelab.analysis.power import (
    POWER,
    detectable_difference,
    seeds_to_decide,
    welch_power,
)
from pelab.analysis.sequential import ALPHA, LOOKS
from pelab.analysis.table import ablation
from tests.analysis.records import record


def simulated_power(diff, sd_a, sd_b, n, level, draws=4000, seed=0) -> float:
    """The share of ``draws`` simulated experiments (normal seeds) whose Welch test rejects."""
    rng = np.random.default_rng(seed)
    a = rng.normal(diff, sd_a, size=(draws, n))
    b = rng.normal(0.0, sd_b, size=(draws, n))
    return float(np.mean(scipy_stats.ttest_ind(a.T, b.T, equal_var=False).pvalue < level))


@pytest.mark.parametrize(
    "diff, sd_a, sd_b, n, level",
    [
        (0.10, 0.08, 0.05, 5, 0.05),
        (0.20, 0.15, 0.02, 4, 0.05 / 24),
        (0.05, 0.03, 0.03, 9, 0.01),
        (0.30, 0.10, 0.10, 3, 0.05 / 24),  # 3 seeds: the estimated dof decide
    ],
)
def test_the_power_of_welchs_test_agrees_with_a_simulation_of_it(diff, sd_a, sd_b, n, level):
    computed = welch_power(diff, sd_a**2, sd_b**2, n, level)
    assert computed == pytest.approx(simulated_power(diff, sd_a, sd_b, n, level), abs=0.03)


def test_the_seeds_that_decide_are_the_fewest_with_80_percent_power():
    """The least n whose simulated power reaches 80% (and n - 1's does not), found by the
    noncentral t: checked by simulating Welch's test at n - 1 and n seeds."""
    a, b = [0.62, 0.70, 0.55], [0.80, 0.74, 0.86]  # 3 seeds: p = 0.045 at alpha / 4
    level = ALPHA / 4
    n = int(seeds_to_decide(a, b, level))
    sd_a, sd_b, diff = np.std(a, ddof=1), np.std(b, ddof=1), np.mean(a) - np.mean(b)
    assert 3 < n < 20
    assert simulated_power(diff, sd_a, sd_b, n, level) >= POWER - 0.03
    assert simulated_power(diff, sd_a, sd_b, n - 1, level) < POWER + 0.03
    assert welch_power(diff, sd_a**2, sd_b**2, n - 1, level) < POWER
    assert seeds_to_decide([0.5, 0.6], [0.5, 0.6], level) == float("inf")  # no difference seen
    assert seeds_to_decide([0.0, 1.0], [0.01, 0.99], level) == float("inf")  # beyond MAX_SEEDS


def test_the_detectable_difference_has_80_percent_power_at_the_columns_seeds():
    variance, n, level = 0.1**2, 3, ALPHA / 24
    d = detectable_difference(variance, n, level)
    assert simulated_power(d, 0.1, 0.1, n, level) == pytest.approx(POWER, abs=0.03)
    assert detectable_difference(variance, 12, level) < d / 2  # more seeds, smaller differences
    assert detectable_difference(0.0, 3, level) == 0.0
    assert np.isnan(detectable_difference(variance, 1, level))


def seeds(pe: str, scores: list[float]) -> list[dict]:
    return [record(pe, "copy", s, {8: v, 16: v, 32: v}, chance=0.0) for s, v in enumerate(scores)]


def test_a_column_says_what_it_can_detect_and_what_would_decide_each_undecided_cell():
    """alibi is best; rope is within noise (bold, undecided): its cell names the planned look
    that would decide it, by ``sequential.seeds_to_decide`` at the column's Holm level for 2
    comparisons; none is decided (not bold) and says nothing; the column's detectable
    difference (at the look its 3 seeds reached: alpha/2 x the first look's share) is its
    row."""
    alibi, rope, none = [0.90, 0.84, 0.95], [0.80, 0.76, 0.84], [0.10, 0.12, 0.11]
    records = seeds("alibi", alibi) + seeds("rope", rope) + seeds("none", none)
    result = ablation(runs_frame(records), lengths_frame(records))
    column = result.by_task.query("split == 'ID' and metric == 'exact_match'").set_index("pe")
    assert column["best"].to_dict() == {"alibi": True, "rope": True, "none": False}
    expected = sequential.seeds_to_decide(rope, alibi, ALPHA / 2)
    assert column.loc["rope", "seeds_to_decide"] == expected and expected in LOOKS[1:]
    assert column[["seeds_to_decide"]].drop(index="rope").isna().all().all()
    variance = np.mean([np.var(v, ddof=1) for v in (alibi, rope, none)])
    first = ALPHA / 2 * sequential.shares(LOOKS)[0]
    assert column["detectable"].eq(detectable_difference(variance, 3, first)).all()
    table, _ = pivot(
        result.by_task[result.by_task["metric"] == "exact_match"], ["pe"], ["task", "split"]
    )
    assert table.loc["rope", ("copy", "ID")].endswith(f" · {expected:.0f} seeds decide")
    assert table.loc["detectable", ("copy", "ID")] == f"±{column['detectable'].iloc[0] * 100:.1f}"
    assert decide_text(float("inf")) == f" · >{LOOKS[-1]} seeds" and decide_text(np.nan) == ""
    assert pd.isna(column.loc["alibi", "seeds_to_decide"])


def test_the_seeds_that_decide_are_the_first_planned_look_with_80_percent_power_at_its_share():
    """The planned look (beyond those both cells reached) whose power at the Holm level times
    its share of alpha reaches 80%, and no earlier one's does; none: beyond the last look."""
    a, b, level = [0.80, 0.76, 0.84], [0.90, 0.84, 0.95], ALPHA / 2
    n = sequential.seeds_to_decide(a, b, level)
    share = dict(zip(LOOKS, sequential.shares(LOOKS), strict=True))
    diff, var_a, var_b = np.mean(a) - np.mean(b), np.var(a, ddof=1), np.var(b, ddof=1)
    assert welch_power(diff, var_a, var_b, int(n), level * share[n]) >= POWER
    earlier = [k for k in LOOKS if 3 < k < n]
    assert all(welch_power(diff, var_a, var_b, k, level * share[k]) < POWER for k in earlier)
    assert sequential.seeds_to_decide([0.5, 0.6, 0.7], [0.5, 0.6, 0.7], level) == float("inf")
