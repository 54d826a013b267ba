"""How many seeds would decide: the power of Welch's t-test (``welch_power``: exact given the
sample variances, integrated over their distribution), the seeds per cell at which an observed
difference would be significant (``seeds_to_decide``) and the smallest difference a column's
seeds could detect (``detectable_difference``), both with ``POWER``."""

from __future__ import annotations

import functools

import numpy as np
from scipy import optimize, special
from scipy import stats as scipy_stats
from scipy.stats import qmc

POWER = 0.8  # what "could detect" and "would decide" mean: this chance of a significant test
MAX_SEEDS = 100  # seeds per cell beyond which a difference counts as not decidable by seeds
VARIANCE_POINTS = 2**10  # pairs of sample variances that welch_power averages over


def welch_power(diff: float, var_a: float, var_b: float, n: int, level: float) -> float:
    """The power of Welch's two-sided t-test at ``level`` with ``n`` seeds on each side whose
    true means differ by ``diff`` and whose variances are ``var_a``, ``var_b``. Given the two
    sample variances, the test rejects when the normal difference of means falls beyond
    ``t(1 - level/2, Welch-Satterthwaite dof) x`` its estimated standard error, a normal
    probability; that is averaged over the sample variances (each ``var x chi2(n - 1) /
    (n - 1)``) at ``VARIANCE_POINTS`` scrambled Sobol points (a fixed seed: the same answer every
    time). At few seeds the estimated degrees of freedom decide the power (the noncentral t with
    the true ones overstates it: 0.80 where the test has 0.50, at 3 seeds and alpha / 24)."""
    if var_a + var_b == 0:
        return 1.0 if diff != 0 else 0.0
    chi_a, chi_b = chi2_points(n - 1)  # [points] each: chi2(n - 1) / (n - 1)
    sample_a, sample_b = var_a * chi_a, var_b * chi_b
    estimated = np.sqrt((sample_a + sample_b) / n)
    share = sample_a / np.maximum(sample_a + sample_b, 1e-300)  # dof = (n-1) / (s^2 + (1-s)^2)
    critical = t_critical(n - 1, level)(1 / (share**2 + (1 - share) ** 2)) * estimated
    sd = np.sqrt((var_a + var_b) / n)  # of the difference of the means
    beyond = special.ndtr((abs(diff) - critical) / sd)  # the normal cdf
    beyond += special.ndtr((-abs(diff) - critical) / sd)
    return float(np.mean(beyond))


@functools.cache
def chi2_points(dof: int) -> tuple[np.ndarray, np.ndarray]:
    """Two independent samples of ``chi2(dof) / dof`` at scrambled Sobol points."""
    uniform = qmc.Sobol(d=2, scramble=True, seed=0).random(VARIANCE_POINTS)  # [points, 2]
    chi = scipy_stats.chi2.ppf(uniform, dof) / dof
    return chi[:, 0], chi[:, 1]


@functools.cache
def t_critical(dof: int, level: float):
    """``t(1 - level/2, dof x r)`` as a function of ``r`` in [1, 2] (Welch's degrees of freedom
    lie between ``dof`` and ``2 dof``), interpolated from 65 exact values."""
    ratios = np.linspace(1, 2, 65)
    values = scipy_stats.t.ppf(1 - level / 2, dof * ratios)
    return lambda r: np.interp(r, ratios, values)


def seeds_to_decide(a, b, level: float) -> float:
    """The fewest seeds per cell (>= 2) at which Welch's test at ``level`` would find the
    observed difference of ``a`` and ``b`` significant with ``POWER``, their observed variances
    taken as true; ``inf`` beyond ``MAX_SEEDS`` (or when the means are equal)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    diff, var_a, var_b = a.mean() - b.mean(), a.var(ddof=1), b.var(ddof=1)
    if welch_power(diff, var_a, var_b, MAX_SEEDS, level) < POWER:
        return float("inf")
    low, high = 2, MAX_SEEDS  # power grows with n: the least n that reaches POWER
    while low < high:
        middle = (low + high) // 2
        if welch_power(diff, var_a, var_b, middle, level) >= POWER:
            high = middle
        else:
            low = middle + 1
    return float(low)


def detectable_difference(variance: float, n: int, level: float) -> float:
    """The smallest difference of means that Welch's test at ``level`` finds with ``POWER`` at
    ``n`` seeds per cell, both cells of ``variance``; NaN below two seeds."""
    if n < 2:
        return float("nan")
    if variance == 0:
        return 0.0
    scale = np.sqrt(2 * variance / n)
    return float(
        optimize.brentq(
            lambda d: welch_power(d, variance, variance, n, level) - POWER, 0, 100 * scale
        )
    )
