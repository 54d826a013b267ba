"""The false-positive rate of adding seeds after looking (issue 52, item 3), by simulation under
the null: ``python scripts/null_simulation.py [--comparisons 20000] [--seed 0]``.

Each simulated comparison is two cells of equal true means whose seeds are normal with
variances drawn from a shipped baseline's cells (``baseline_variances``: the observed variances
of its out-of-distribution token-accuracy cells, at their first 3 seeds). Both start at 3 seeds
and run ``--add-seeds``'s loop to its budget, at most ``LOOKS[-1]`` seeds per cell:

- **naive** (pelab before issue 52): Welch's test at alpha = 0.05; while undecided, add the seeds
  the fixed-sample power calculation asks for (``power.seeds_to_decide``: 80% power for the
  observed difference), if the budget allows, and test again at alpha;
- **sequential** (``sequential``): the test at the planned looks, alpha spent over them; while
  undecided, add the seeds of the planned look that would decide (``sequential.seeds_to_decide``)
  and test again.

A procedure's false-positive rate is the share of comparisons it ever declares significant; a
valid one keeps it at or below alpha. ``rates`` returns both with their binomial standard
errors.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from pelab.analysis import baseline, power, sequential
from pelab.analysis.collect import load_records
from pelab.analysis.frames import lengths_frame, runs_frame
from pelab.analysis.sequential import ALPHA, LOOKS
from pelab.analysis.table import ablation


def baseline_variances(name: str = "ablation_cpu", metric: str = "token_acc") -> np.ndarray:
    """The variances (ddof 1) of the first 3 seeds of each out-of-distribution cell of the
    shipped baseline ``name`` whose seeds all learned (the cells that are compared)."""
    records = load_records([baseline.find(name)])
    return variances_of(ablation(runs_frame(records), lengths_frame(records), metric).by_task)


def variances_of(stats: pd.DataFrame, metric: str = "token_acc") -> np.ndarray:
    """The variances (ddof 1) of the first look's seeds of each out-of-distribution cell of
    ``stats`` (``Ablation.by_task``) that competes."""
    cells = stats[(stats["metric"] == metric) & (stats["split"] == "OOD") & stats["competes"]]
    first = LOOKS[0]
    return np.array([np.var(v[:first], ddof=1) for v in cells["values"] if len(v) >= first])


def naive(seeds: np.ndarray) -> bool:
    """Welch at alpha after every addition, seeds as the fixed-sample power asks (budget:
    ``LOOKS[-1]`` per cell); ``seeds``: ``[2, LOOKS[-1]]``, each cell's stream."""
    return _added_until_decided(
        seeds,
        lambda a, b: sequential.welch_difference(a, b).p_value,
        lambda a, b: power.seeds_to_decide(a, b, ALPHA),
    )


def planned(seeds: np.ndarray) -> bool:
    """The sequential test; seeds added to the planned look that would decide."""
    return _added_until_decided(
        seeds,
        lambda a, b: sequential.sequential_test(a, b).p,
        lambda a, b: sequential.seeds_to_decide(a, b, ALPHA),
    )


def _added_until_decided(
    seeds: np.ndarray,
    p_value: Callable[[np.ndarray, np.ndarray], float],
    wanted: Callable[[np.ndarray, np.ndarray], float],
) -> bool:
    """``--add-seeds``'s loop on one comparison: from the first look's seeds, test (``p_value``
    below alpha: significant); while undecided, bring both cells to the seeds ``wanted`` asks,
    within ``LOOKS[-1]``; False once nothing more would decide."""
    n = LOOKS[0]
    while True:
        a, b = seeds[0, :n], seeds[1, :n]
        if p_value(a, b) < ALPHA:
            return True
        more = wanted(a, b)
        if math.isinf(more) or more <= n or more > LOOKS[-1]:
            return False
        n = int(more)


def rates(
    variances: np.ndarray, comparisons: int, seed: int = 0
) -> dict[str, tuple[float, float]]:
    """``{"naive": (rate, standard error), "sequential": (...)}`` over ``comparisons`` simulated
    null comparisons, each procedure on the same seeds: normal around 0.5, clipped to [0, 1]
    as scores are (symmetric about 0.5, so both cells keep the mean 0.5)."""
    rng = np.random.default_rng(seed)
    hits = {"naive": 0, "sequential": 0}
    for _ in range(comparisons):
        sd = np.sqrt(rng.choice(variances, size=2))
        seeds = np.clip(0.5 + sd[:, None] * rng.standard_normal((2, LOOKS[-1])), 0.0, 1.0)
        hits["naive"] += naive(seeds)
        hits["sequential"] += planned(seeds)
    return {
        name: (count / comparisons, math.sqrt(count * (comparisons - count) / comparisons**3))
        for name, count in hits.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="null_simulation.py", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--comparisons", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--baseline", default="ablation_cpu")
    args = parser.parse_args(argv)
    variances = baseline_variances(args.baseline)
    found = rates(variances, args.comparisons, args.seed)
    print(
        f"{args.comparisons} null comparisons, variances of {len(variances)} OOD token-accuracy "
        f"cells of baselines/{args.baseline}, 3 seeds then seeds added up to {LOOKS[-1]} per "
        f"cell; alpha = {ALPHA}:"
    )
    for name, (rate, error) in found.items():
        print(f"  {name:10s} false-positive rate {rate:.4f} ± {error:.4f} (binomial s.e.)")
    return 0
