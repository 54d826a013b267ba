"""Comparisons that may get seeds after a look, tested validly (issue 52, item 3): a
group-sequential design, Holm's correction over a declared family, and the interval that agrees
with the verdict.

**The design.** Two cells are compared at planned looks: ``LOOKS`` seeds per cell (3, 5 and
10; the last is the most a cell is planned to get). At look ``j`` the first ``n_j`` seeds of each
cell (by seed number: seeds added later have higher ones) are compared by Welch's t-test, and
its p-value ``p_j`` is held against the share of alpha spent at that look, ``alpha_j = f(n_j /
N) - f(n_(j-1) / N)``, with Lan & DeMets' (1983) Pocock-type spending function ``f(t) = alpha
ln(1 + (e - 1) t)`` (``N`` the last look's seeds): 0.0208, 0.0102 and 0.0190 of alpha = 0.05.
A comparison's **sequential p-value** is ``p = min_j min(1, p_j alpha / alpha_j)`` over the
looks both cells reached. It is a valid p-value whatever the correlation of the looks and
however the seeds were added between them, taken or skipped (Bonferroni's inequality over the
planned looks: ``P(p <= x) <= sum_j x alpha_j / alpha = x``), so a table may be read at any
point of the plan and seeds added where it is undecided without inflating the false-positive
rate, as re-testing at a fixed level does (Armitage, McPherson & Rowe 1969: optional stopping).
Seeds beyond a look's ``n_j`` wait for the next look: a cell of 4 seeds is compared on its first
3. Exact group-sequential boundaries (Jennison & Turnbull 2000, ch. 7) would spend the same alpha
a little less conservatively by using the looks' correlation, but assume a known variance or a
large sample; an anytime-valid test (e-values, confidence sequences: Howard et al. 2021,
Ramdas et al. 2023) allows a look after every seed, but at 3-10 seeds per cell its power is far
below Welch's (docs/tables.md, "Adding seeds after looking").

**The family and the interval.** ``holm`` adjusts a declared family of sequential p-values by
Holm's step-down (1979) and gives each comparison the level of its verdict: its own step's
``alpha / (m - r + 1)`` when decided, else the step at which Holm stopped. ``verdicts`` then
prints Welch's interval at that level times the look's share: a decided comparison at the first
look that decides it, an undecided one at its last look. So the interval excludes 0 exactly when
the comparison is decided (Welch's interval at confidence ``1 - x`` excludes 0 iff its p < x).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from pelab.analysis.power import POWER, detectable_difference, welch_power

ALPHA = 0.05  # the family-wise error rate of every verdict: bold, the reference comparisons
LOOKS = (3, 5, 10)  # seeds per cell at each planned look; the last: the most a cell gets


def spent(t: float, alpha: float = ALPHA) -> float:
    """Lan & DeMets' Pocock-type spending function: the alpha spent by information ``t``."""
    return alpha * math.log(1 + (math.e - 1) * min(max(t, 0.0), 1.0))


def shares(looks: tuple[int, ...] = LOOKS) -> tuple[float, ...]:
    """Each look's share of alpha, ``alpha_j / alpha`` (they sum to 1)."""
    cumulative = [spent(n / looks[-1], 1.0) for n in looks]
    return tuple(np.diff([0.0, *cumulative]).tolist())


def reached(n: int, looks: tuple[int, ...] = LOOKS) -> int:
    """How many looks a comparison whose smaller cell has ``n`` seeds has reached."""
    return sum(n >= planned for planned in looks)


@dataclass(frozen=True)
class Sequential:
    """Welch's test of two cells at every look both reached: ``p_values[j]`` at ``looks[j]``
    seeds per cell, ``p`` the sequential p-value."""

    a: np.ndarray  # a cell's seeds, in seed order
    b: np.ndarray
    looks: tuple[int, ...]
    p_values: tuple[float, ...]

    @property
    def p(self) -> float:
        share = shares(self.looks)
        return min(min(1.0, p / share[j]) for j, p in enumerate(self.p_values))

    def at(self, look: int, confidence: float) -> Difference:
        """The difference at look ``look`` (0-based) with its Welch interval at ``confidence``."""
        n = self.looks[look]
        return welch_difference(self.a[:n], self.b[:n], confidence)


def sequential_test(a, b, looks: tuple[int, ...] = LOOKS) -> Sequential | None:
    """The looks both cells reached; None before the first. ``a``, ``b``: every run of a cell
    in seed order, NaN for one without a result (failed, still running, missing): a look is
    reached once the cell's first ``n_j`` seeds all have one, so the seeds a look compares are
    fixed, never a later seed standing in for one that has not finished."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    count = min(_complete(a, looks), _complete(b, looks))
    if not count:
        return None
    p_values = tuple(welch_difference(a[:n], b[:n]).p_value for n in looks[:count])
    return Sequential(a, b, looks, p_values)


def _complete(values: np.ndarray, looks: tuple[int, ...]) -> int:
    """How many looks a cell reached: its first ``n_j`` seeds all have a result."""
    return sum(len(values) >= n and bool(np.isfinite(values[:n]).all()) for n in looks)


def holm(p_values: pd.Series, alpha: float = ALPHA) -> pd.DataFrame:
    """Holm's step-down over a declared family: every entry is a member, NaN for one not tested
    yet (short of the first look: it counts as p = 1, so the family's size ``m`` stays what was
    declared as seeds arrive). Per comparison ``adjusted`` (Holm's adjusted p; NaN untested),
    ``decided`` (rejected by the step-down), ``level`` (the level of its verdict: its step's
    ``alpha / (m - r + 1)`` when decided, else the step at which Holm stopped) and ``m``."""
    m = len(p_values)
    ordered = p_values.fillna(1.0).sort_values(kind="stable")
    adjusted, level, decided = [], [], []
    running, stopped = 0.0, None
    for rank, p in enumerate(ordered):
        step = alpha / (m - rank)
        running = max(running, min(1.0, p * (m - rank)))
        if stopped is None and not p < step:
            stopped = step
        adjusted.append(running)
        decided.append(stopped is None)
        level.append(step if stopped is None else stopped)
    frame = {"adjusted": adjusted, "decided": decided, "level": level}
    out = pd.DataFrame(frame, index=ordered.index).reindex(p_values.index).assign(m=m)
    return out.assign(adjusted=out["adjusted"].where(p_values.notna()))


@dataclass(frozen=True)
class Verdict:
    """One comparison of a family: the difference at the look that decides (or the last), its
    interval at the verdict's level, Holm's adjusted p and the family's size ``m``."""

    difference: Difference
    confidence: float  # of the interval: 1 - Holm's level x the look's share
    p_adjusted: float
    decided: bool
    m: int
    seeds: int  # per cell, at the look shown


def verdicts(tests: dict, alpha: float = ALPHA) -> dict:
    """The verdict of each comparison of a declared family ``{key: Sequential, or None for a
    member not tested yet}`` (Holm over all of them); untested members get none."""
    p = {key: np.nan if test is None else test.p for key, test in tests.items()}
    family = holm(pd.Series(p, dtype=float), alpha)
    rows = family.to_dict("index")
    out = {}
    for key, test in tests.items():
        if test is None:  # a member short of the first look: in the family, not tested
            continue
        adjusted, level, m = rows[key]["adjusted"], rows[key]["level"], rows[key]["m"]
        decided = bool(rows[key]["decided"])
        share = shares(test.looks)
        deciding = [
            j for j, q in enumerate(test.p_values) if decided and min(1.0, q / share[j]) < level
        ] or [len(test.p_values) - 1]
        look = deciding[0]
        confidence = 1 - level * share[look]
        out[key] = Verdict(
            test.at(look, confidence), confidence, adjusted, decided, int(m), test.looks[look]
        )
    return out


def seeds_to_decide(a, b, level: float, looks: tuple[int, ...] = LOOKS) -> float:
    """The seeds per cell of the first planned look, beyond those both cells reached, at which
    Welch's test at ``level`` x that look's share would find the observed difference of ``a``
    and ``b`` with ``POWER``, their observed variances taken as true; ``inf`` when no planned
    look would (or the means are equal)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    diff, var_a, var_b = a.mean() - b.mean(), a.var(ddof=1), b.var(ddof=1)
    share = shares(looks)
    last = len(looks) - 1  # most differences no look decides: the last look tells first
    if welch_power(diff, var_a, var_b, looks[last], level * share[last]) < POWER:
        return float("inf")
    for j in range(reached(min(len(a), len(b)), looks), len(looks)):
        if welch_power(diff, var_a, var_b, looks[j], level * share[j]) >= POWER:
            return float(looks[j])
    return float("inf")


def detectable(variance: float, n: int, level: float, looks: tuple[int, ...] = LOOKS) -> float:
    """The smallest difference a column whose cells have ``n`` seeds (and ``variance``) would
    find with ``POWER`` at the look they reached (``level`` x its share); NaN before the first."""
    count = reached(n, looks)
    if not count:
        return float("nan")
    return detectable_difference(variance, looks[count - 1], level * shares(looks)[count - 1])


@dataclass(frozen=True)
class Difference:
    """An effect size: ``mean(a) - mean(b)`` with its Welch interval at ``confidence`` and
    Welch's p-value."""

    diff: float
    low: float
    high: float
    p_value: float
    n_a: int
    n_b: int
    confidence: float = 0.95

    def __str__(self) -> str:
        return (
            f"{self.diff * 100:+.1f} points [{self.low * 100:+.1f}, {self.high * 100:+.1f}] "
            f"({self.confidence:.1%} interval), Welch p = {self.p_value:.3g} "
            f"(n = {self.n_a} vs {self.n_b})"
        )


def welch_difference(a, b, confidence: float = 0.95) -> Difference:
    """The difference of two means over seeds, ``a - b``, with its confidence interval at
    ``confidence`` and the two-sided p-value of Welch's t-test (as
    ``scipy.stats.ttest_ind(equal_var=False)`` gives them, computed here at a hundredth of its
    cost): ``t = d / se``, ``se^2 = s_a^2 / n_a + s_b^2 / n_b``, Welch-Satterthwaite degrees of
    freedom ``se^4 / sum((s^2 / n)^2 / (n - 1))``, so the interval excludes 0 iff p < 1 -
    confidence. Two sides without any spread: the interval is the difference itself, and p is 1
    if it is zero, else 0."""
    # scores are fractions of samples: rounding away float noise keeps equal scores equal
    # (0.1 + 0.2 against 0.3 would otherwise read as a difference without spread: p = 0)
    a, b = np.round(np.asarray(a, dtype=float), 12), np.round(np.asarray(b, dtype=float), 12)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"a difference needs two seeds on each side, got {len(a)} and {len(b)}")
    outside = [v for v in (*a, *b) if not 0.0 <= v <= 1.0]
    if outside:  # it prints points, x100: percents would read as thousands
        raise ValueError(
            f"welch_difference takes scores as fractions in [0, 1], as records hold them; got "
            f"{outside[0]:g}: divide percents by 100"
        )
    diff = float(a.mean() - b.mean())
    share_a, share_b = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)  # each mean's variance
    if share_a == 0 and share_b == 0:
        return Difference(diff, diff, diff, float(diff == 0), len(a), len(b), confidence)
    se = math.sqrt(share_a + share_b)
    dof = (share_a + share_b) ** 2 / (share_a**2 / (len(a) - 1) + share_b**2 / (len(b) - 1))
    p = float(2 * scipy_stats.t.sf(abs(diff) / se, dof))
    half = float(scipy_stats.t.ppf(0.5 + confidence / 2, dof)) * se
    return Difference(diff, diff - half, diff + half, p, len(a), len(b), confidence)
