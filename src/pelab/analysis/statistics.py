"""The statistics of a table cell: the seeds of one setting in one column.

- ``cell_stats``: the mean with its 95% confidence interval (Student's t-interval over the
  seeds, ``mean ± t(0.975, n-1) · std / √n``; none for one seed, ``t_interval``), the standard
  deviation (``ddof=1``), the best seed, and how many of the cell's runs have a result, failed,
  are missing or learned the task;
- ``mark_best`` (bold): the best mean of a column and every cell not significantly different
  from it: Welch's t-test against the best cell's seeds at the planned looks both reached
  (``sequential``), two-sided, α = 0.05 (``ALPHA``), Holm's correction over the column's
  comparisons with its best (the family: the column's competing cells as shown). A cell, or a
  best, short of the first look's seeds cannot be told apart and stays bold with it. A column
  of one value, or whose best competing cell is 0.0, has no bold; out of distribution only
  cells whose seeds all learned the task compete;
- what a column cannot tell yet (issue 44): ``detectable`` (per column), the smallest difference
  its seeds could detect at the look they reached, and ``seeds_to_decide`` (per undecided
  cell), the seeds per cell of the planned look at which the observed difference from the best
  would be significant: both with 80% power (``POWER``) for Welch's test at the column's Holm
  level for its first comparison (``ALPHA / m``, m comparisons) times the look's share of
  alpha, from the observed variances (``pelab.analysis.power``);
- ``steps_stats``: the steps each row needed to learn each task (competence budgets).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from pelab.analysis.sequential import ALPHA, holm, seeds_to_decide, sequential_test
from pelab.analysis.sequential import detectable as sequential_detectable


def cell_stats(frame: pd.DataFrame, rows: list[str], cols: list[str], value: str) -> pd.DataFrame:
    """Per (row, column) cell: ``mean``, ``std``, ``max`` and ``n`` of ``value`` over the
    completed runs, ``runs`` (all, failed and missing included), ``failed`` (failed, crashed or
    still running), ``missing``, ``not_completed`` (those runs' statuses, e.g. ``failed,
    running``), ``values`` (the completed seeds' values) and ``ordered`` (every run's value in
    seed order, NaN without a result: what a look compares, ``sequential``). Rows and columns
    keep their order of appearance."""
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
    if "seed" in data:  # ``values`` in seed order: a look compares each cell's first seeds
        data = data.sort_values("seed", kind="stable")
    stats = (
        data.groupby([*rows, *cols], observed=True)
        .agg(
            mean=("_value", "mean"),
            std=("_value", "std"),
            max=("_value", "max"),
            n=("_value", "count"),
            values=("_value", lambda v: tuple(v.dropna())),
            ordered=("_value", tuple),  # every run's, in seed order, NaN without a result
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


def mark_best(stats: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """``top``: the column's best mean (at the displayed precision); ``p_vs_top``: the
    sequential Welch test of each cell against it (``sequential``: at the planned looks both
    reached), Holm-adjusted over the column's comparisons with its best (``family``: their
    number); ``best`` (bold): the top cell and every cell not significantly different from it;
    ``competes``: the cell takes part (it has a result and may rank in its column). Only
    columns with more than one value whose best competing cell is above 0.0 rank (a column of
    0.0 has no bold); in an out-of-distribution column only cells whose seeds all learned the
    task compete (every cell does when no run had a criterion). A cell, or a best, short of
    the first look's seeds cannot be told apart and stays bold."""
    eligible = stats["split"].ne("OOD") | stats["learned"].eq(stats["judged"])
    eligible &= stats["n"].gt(0)
    shown = stats["mean"].mul(100).round(1)  # as displayed
    keys = [stats[c] for c in cols]
    top_value = shown.where(eligible).groupby(keys, observed=True).transform("max")
    varies = shown.groupby(keys, observed=True).transform("nunique").gt(1)
    ranks = varies & top_value.gt(0)
    top = eligible & shown.eq(top_value) & ranks
    p_values = pd.Series(np.nan, index=stats.index)
    decided = pd.Series(False, index=stats.index)
    family = pd.Series(np.nan, index=stats.index)
    decide = pd.Series(np.nan, index=stats.index)
    detectable = pd.Series(np.nan, index=stats.index)
    for _, column in stats[eligible & ranks].groupby(keys, observed=True):
        leader = column.index[top[column.index]][0]
        # the family: every other competing cell of the column shown, tested or not yet
        tests = {
            index: sequential_test(cell, column["ordered"][leader])
            for index, cell in column["ordered"].items()
            if index != leader
        }
        adjusted = holm(pd.Series({i: t and t.p for i, t in tests.items()}, dtype=float))
        p_values[adjusted.index] = adjusted["adjusted"]
        decided[adjusted.index] = adjusted["decided"] & adjusted["adjusted"].notna()
        family[column.index] = len(tests)
        level = ALPHA / max(1, len(tests))  # Holm's first step: what would decide
        spread = column[column["n"].ge(2)]
        if len(spread):
            variance = float(np.mean([np.var(v, ddof=1) for v in spread["values"]]))
            detectable[column.index] = sequential_detectable(
                variance, int(spread["n"].median()), level
            )
        reference = column["values"][leader]
        if len(reference) < 2:
            continue
        for index in column.index[~top[column.index] & ~decided[column.index]]:
            cell = column["values"][index]
            if len(cell) >= 2:
                decide[index] = seeds_to_decide(cell, reference, level)
    best = top | (eligible & ranks & ~decided)
    return stats.assign(
        competes=eligible,
        top=top,
        p_vs_top=p_values,
        family=family,
        best=best,
        seeds_to_decide=decide.where(best & ~top),
        detectable=detectable,
    )


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
