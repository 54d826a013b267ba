"""The statistics of a table cell: the seeds of one setting in one column.

- ``cell_stats``: the mean with its 95% confidence interval (Student's t-interval over the
  seeds, ``mean ± t(0.975, n-1) · std / √n``; none for one seed, ``t_interval``), the standard
  deviation (``ddof=1``), the best seed, and how many of the cell's runs have a result, failed,
  are missing or learned the task;
- ``mark_best`` (bold): the best mean of a column and every cell not significantly different
  from it: Welch's t-test against the best cell's seeds, two-sided, α = 0.05 (``ALPHA``), Holm's
  correction over the column's comparisons (``significance``). A cell with fewer than two seeds,
  or a best cell with fewer than two, cannot be told apart and stays bold with it. A column of
  one value, or whose best competing cell is 0.0, has no bold; out of distribution only cells
  whose seeds all learned the task compete;
- what a column cannot tell yet (issue 44): ``detectable`` (per column), the smallest difference
  its seeds could detect, and ``seeds_to_decide`` (per undecided cell), the seeds per cell at
  which the observed difference from the best would be significant: both with 80% power
  (``POWER``) for Welch's test at the column's Holm level for its first comparison (``ALPHA / m``,
  m comparisons), from the observed variances (``pelab.analysis.power``);
- ``welch_difference``: an effect size between two cells, with its interval and p-value;
- ``steps_stats``: the steps each row needed to learn each task (competence budgets).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from pelab.analysis.power import detectable_difference, seeds_to_decide

ALPHA = 0.05  # the significance level of bold: not significantly different from the best


def cell_stats(frame: pd.DataFrame, rows: list[str], cols: list[str], value: str) -> pd.DataFrame:
    """Per (row, column) cell: ``mean``, ``std``, ``max`` and ``n`` of ``value`` over the
    completed runs, ``runs`` (all, failed and missing included), ``failed`` (failed, crashed or
    still running), ``missing``, ``not_completed`` (those runs' statuses, e.g. ``failed,
    running``) and ``best`` (the column's best mean). Rows and columns keep their order of
    appearance."""
    done = frame["status"].eq("completed")
    learned = frame["learned"] if "learned" in frame else pd.Series(None, index=frame.index)
    data = frame.assign(
        _value=frame[value].where(done),
        _failed=~done & frame["status"].ne("missing"),
        _missing=frame["status"].eq("missing"),
        _judged=done & learned.notna(),
        _learned=done & learned.eq(True),
    )
    for key in (*rows, *cols):
        data[key] = pd.Categorical(data[key], categories=_appearance(data[key]), ordered=True)
    stats = (
        data.groupby([*rows, *cols], observed=True)
        .agg(
            mean=("_value", "mean"),
            std=("_value", "std"),
            max=("_value", "max"),
            n=("_value", "count"),
            values=("_value", lambda v: tuple(v.dropna())),
            runs=("status", "size"),
            failed=("_failed", "sum"),
            missing=("_missing", "sum"),
            not_completed=("status", _other_statuses),
            judged=("_judged", "sum"),
            learned=("_learned", "sum"),
        )
        .reset_index()
    )
    low, high = t_interval(stats["mean"], stats["std"], stats["n"])
    # a score lies in [0, 1]: so does its interval, in the CSV files as in the tables
    return stats.assign(ci95_low=low.clip(0.0, 1.0), ci95_high=high.clip(0.0, 1.0))


def t_interval(mean: pd.Series, std: pd.Series, n: pd.Series) -> tuple[pd.Series, pd.Series]:
    """The 95% Student's t-interval of a mean over ``n`` seeds; NaN for fewer than two."""
    dof = n.sub(1).where(n > 1)
    half = pd.Series(scipy_stats.t.ppf(0.975, dof), index=mean.index) * std / np.sqrt(n)
    return mean - half, mean + half


@dataclass(frozen=True)
class Difference:
    """An effect size: ``mean(a) - mean(b)`` with its 95% Welch interval and Welch's p-value."""

    diff: float
    low: float
    high: float
    p_value: float
    n_a: int
    n_b: int

    def __str__(self) -> str:
        return (
            f"{self.diff * 100:+.1f} points [{self.low * 100:+.1f}, {self.high * 100:+.1f}], "
            f"Welch p = {self.p_value:.3g} (n = {self.n_a} vs {self.n_b})"
        )


def welch_test(a, b):  # noqa: ANN201 (scipy's TtestResult)
    """``scipy.stats.ttest_ind(a, b, equal_var=False)``, without scipy's warning of "precision
    loss" for a side whose seeds all score the same (100% on every seed): its variance is
    exactly 0, which Welch's test takes as it is."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
        return scipy_stats.ttest_ind(a, b, equal_var=False)


def welch_difference(a, b) -> Difference:
    """The difference of two means over seeds, ``a - b``, with its 95% confidence interval
    (Welch-Satterthwaite degrees of freedom) and the two-sided p-value of Welch's t-test
    (``scipy.stats.ttest_ind(equal_var=False)``). Two sides without any spread: the interval
    is the difference itself, and p is 1 if it is zero, else 0."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"a difference needs two seeds on each side, got {len(a)} and {len(b)}")
    outside = [v for v in (*a, *b) if not 0.0 <= v <= 1.0]
    if outside:  # it prints points, x100: percents would read as thousands
        raise ValueError(
            f"welch_difference takes scores as fractions in [0, 1], as records hold them; got "
            f"{outside[0]:g}: divide percents by 100"
        )
    diff = a.mean() - b.mean()
    if a.var() == 0 and b.var() == 0:
        return Difference(diff, diff, diff, float(diff == 0), len(a), len(b))
    test = welch_test(a, b)
    interval = test.confidence_interval(confidence_level=0.95)
    return Difference(diff, interval.low, interval.high, float(test.pvalue), len(a), len(b))


def mark_best(stats: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """``top``: the column's best mean (at the displayed precision); ``p_vs_top``: Welch's
    t-test of each cell against it, Holm-corrected over the column (``significance``);
    ``best`` (bold): the top cell and every cell not significantly different from it;
    ``competes``: the cell takes part (it has a result and may rank in its column). Only
    columns with more than one value whose best competing cell is above 0.0 rank (a column of
    0.0 has no bold); in an out-of-distribution column only cells whose seeds all learned the
    task compete (every cell does when no run had a criterion)."""
    eligible = stats["split"].ne("OOD") | stats["learned"].eq(stats["judged"])
    eligible &= stats["n"].gt(0)
    shown = stats["mean"].mul(100).round(1)  # as displayed
    keys = [stats[c] for c in cols]
    top_value = shown.where(eligible).groupby(keys, observed=True).transform("max")
    varies = shown.groupby(keys, observed=True).transform("nunique").gt(1)
    ranks = varies & top_value.gt(0)
    top = eligible & shown.eq(top_value) & ranks
    p_values = pd.Series(np.nan, index=stats.index)
    for _, column in stats[eligible & ranks].groupby(keys, observed=True):
        leader = column.index[top[column.index]][0]
        p_values[column.index] = significance(column["values"], leader)
    best = top | (eligible & ranks & ~p_values.lt(ALPHA))
    decide = pd.Series(np.nan, index=stats.index)
    detectable = pd.Series(np.nan, index=stats.index)
    for _, column in stats[eligible & ranks].groupby(keys, observed=True):
        leader = column.index[top[column.index]][0]
        reference = np.asarray(column["values"][leader], dtype=float)
        spread = column[column["n"].ge(2)]
        level = ALPHA / max(1, len(spread) - (leader in spread.index))
        if len(spread):
            variance = float(np.mean([np.var(v, ddof=1) for v in spread["values"]]))
            detectable[column.index] = detectable_difference(
                variance, int(spread["n"].median()), level
            )
        if len(reference) < 2:
            continue
        for index in column.index[best[column.index] & ~top[column.index]]:
            cell = np.asarray(column["values"][index], dtype=float)
            if len(cell) >= 2:
                decide[index] = seeds_to_decide(cell, reference, level)
    return stats.assign(
        competes=eligible,
        top=top,
        p_vs_top=p_values,
        best=best,
        seeds_to_decide=decide,
        detectable=detectable,
    )


def significance(values: pd.Series, leader) -> pd.Series:
    """Holm-adjusted p-values of Welch's two-sided t-test of each cell's seeds against the
    ``leader`` cell's (NaN for the leader, and where a test is impossible: fewer than two seeds
    on either side, or no variance in either with equal means)."""
    reference = np.asarray(values[leader], dtype=float)
    raw = {}
    for index, cell in values.items():
        cell = np.asarray(cell, dtype=float)
        if index == leader or len(cell) < 2 or len(reference) < 2:
            continue
        raw[index] = welch_test(cell, reference).pvalue
    tested = {i: p for i, p in raw.items() if not np.isnan(p)}
    adjusted = pd.Series(np.nan, index=values.index)
    running = 0.0  # Holm: the k-th smallest p times (m - k + 1), kept monotone, capped at 1
    for rank, (index, p) in enumerate(sorted(tested.items(), key=lambda item: item[1])):
        running = max(running, min(1.0, p * (len(tested) - rank)))
        adjusted[index] = running
    return adjusted


def _other_statuses(statuses: pd.Series) -> str:
    return ", ".join(dict.fromkeys(s for s in statuses if s != "completed"))


def _appearance(values: pd.Series) -> list:
    unique = list(dict.fromkeys(values))
    return sorted(unique) if all(isinstance(v, int | np.integer) for v in unique) else unique


def steps_stats(runs: pd.DataFrame, rows: list[str]) -> pd.DataFrame | None:
    """Per row and task: ``mean`` and ``std`` of ``steps_to_learn`` over the seeds that learned,
    ``learned`` (their count) and ``judged`` (completed runs with a criterion); None when no
    run had one."""
    judged = runs[runs["status"].eq("completed") & runs["learned"].notna()]
    if judged.empty:
        return None
    data = judged.assign(_steps=judged["steps_to_learn"].where(judged["learned"].eq(True)))
    for key in (*rows, "task"):
        data[key] = pd.Categorical(data[key], categories=_appearance(data[key]), ordered=True)
    return (
        data.groupby([*rows, "task"], observed=True)
        .agg(
            mean=("_steps", "mean"),
            std=("_steps", "std"),
            learned=("_steps", "count"),
            judged=("learned", "size"),
        )
        .reset_index()
    )
