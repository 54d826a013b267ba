"""Rows against a fixed reference row (``make_table.py --reference pe=rope``): the question a
reader asks ("does my encoding beat RoPE?"), answered the same way whatever else the table holds.

**The family is declared, not found.** Per column (task, split, metric) the family is {each
compared row vs the reference}: the rows named by ``--compare pe=a,b``, else the user's own
rows (``origin`` ``yours``) when a ``--baseline`` brought its zoo in, else every row of the
sources. ``--filter pe=...`` narrows the rows shown, never the family: the comparisons are made
before it (``pelab.analysis.report``), so adding or hiding unrelated rows changes no verdict.

Each comparison is tested at the planned looks both cells reached (``sequential``: seeds may
have been added after looking), Holm-adjusted over its column's family, and printed with
Welch's interval at the level of its verdict, so the interval excludes 0 exactly where the
comparison is decided (✓). An undecided one says at which planned look (seeds per cell) the
observed difference would be decided with 80% power. Only cells that compete (``mark_best``: in
an out-of-distribution column, seeds that all learned) are compared. Written as
``table_vs_<reference>.{md,tex,csv}`` (``pelab.analysis.reference_tables``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pelab.analysis.baseline import ORIGIN, YOURS
from pelab.analysis.collect import alternatives
from pelab.analysis.sequential import ALPHA, seeds_to_decide, sequential_test, verdicts
from pelab.analysis.table import Ablation
from pelab.errors import ConfigError

COLUMNS = ["task", "split", "metric"]


def row_settings(text: str, option: str, rows: list[str]) -> dict[str, list[str]]:
    """``pe=rope`` or ``pe=a,b`` or ``pe=rope,origin=ablation_cpu`` -> ``{"pe": ["rope"], ...}``
    over the table's row settings; a ``ConfigError`` naming them otherwise. A part without
    ``=`` is one more value of the key before it."""
    wanted: dict[str, list[str]] = {}
    key = None
    for part in alternatives(text):
        if "=" in part:
            key, value = part.split("=", 1)
            wanted.setdefault(key, []).append(value)
        elif key is not None:
            wanted[key].append(part)
    if not wanted or set(wanted) - set(rows):
        raise ConfigError(
            f"{option} {text}: give rows as <setting>=<value>[,...] over the table's row "
            f"settings {', '.join(rows)}, e.g. {option} pe=rope"
        )
    return wanted


def matching(stats: pd.DataFrame, wanted: dict[str, list[str]]) -> pd.Series:
    """Which cells of ``stats`` lie in the rows ``wanted`` names."""
    return pd.Series(
        np.logical_and.reduce([stats[k].astype(str).isin(v) for k, v in wanted.items()]),
        index=stats.index,
    )


def parse_reference(text: str, rows: list[str], stats: pd.DataFrame) -> dict[str, str]:
    """``pe=rope`` (or ``pe=rope,origin=ablation_cpu``) -> ``{"pe": "rope", ...}``: one row of
    the table; a ``ConfigError`` naming the rows there are, or the settings that would tell
    apart the rows it matches."""
    wanted = row_settings(text, "--reference", rows)
    if any(len(v) > 1 for v in wanted.values()):
        raise ConfigError(f"--reference {text}: name one row (one value per setting)")
    match = matching(stats, wanted)
    if not match.any():
        have = sorted({" ".join(f"{k}={r[k]}" for k in wanted) for _, r in stats.iterrows()})
        raise ConfigError(f"--reference {text}: no such row; the table has {', '.join(have)}")
    found = stats.loc[match, rows].astype(str).drop_duplicates()
    if len(found) > 1:
        named = "; ".join(",".join(f"{k}={r[k]}" for k in rows) for _, r in found.iterrows())
        raise ConfigError(
            f"--reference {text}: matches {len(found)} rows ({named}): add the setting that "
            f"tells them apart, e.g. --reference {text},{rows[-1]}={found.iloc[0][rows[-1]]}"
        )
    return {k: v[0] for k, v in wanted.items()}


def compared_rows(
    stats: pd.DataFrame, rows: list[str], reference: dict[str, str], compare: str | None
) -> tuple[pd.Series, str]:
    """The cells of the family's rows, and the family in words: ``--compare``'s rows, else the
    user's rows beside a baseline (``origin`` ``yours``), else every row; never the
    reference."""
    if compare:
        mask, named = matching(stats, row_settings(compare, "--compare", rows)), compare
        if not mask.any():
            raise ConfigError(f"--compare {compare}: no such row in the table")
    elif ORIGIN in rows:
        mask, named = stats[ORIGIN].astype(str).eq(YOURS), "your rows (origin yours)"
    else:
        mask, named = pd.Series(True, index=stats.index), "every row"
    return mask & ~matching(stats, {k: [v] for k, v in reference.items()}), named


def versus(
    stats: pd.DataFrame, rows: list[str], reference: dict[str, str], compared: pd.Series
) -> pd.DataFrame:
    """Each cell of the ``compared`` rows of ``stats`` (``Ablation.by_task`` after
    ``mark_best``) against the reference row's cell of its column, Holm over the column's
    family: ``diff``, ``low``, ``high`` (fractions; the interval at ``confidence``, the
    verdict's level), ``p_holm``, ``family`` (the comparisons it was adjusted over),
    ``seeds`` (per cell, at the look shown), ``decided`` and ``seeds_to_decide``. The
    reference's own cells and cells that cannot be compared (short of the first look's seeds,
    not competing) have NaN; rows outside the family are left out."""
    is_reference = matching(stats, {k: [v] for k, v in reference.items()})
    keep = stats[compared | is_reference]
    out = keep[[*rows, *COLUMNS, "n"]].copy()
    for name in ("diff", "low", "high", "confidence", "p_holm", "family", "seeds"):
        out[name] = np.nan
    out["seeds_to_decide"] = np.nan
    out["decided"] = False
    out["reference"] = is_reference[keep.index]
    found = {}  # index -> the values of its comparison
    for _, column in keep.groupby([keep[c] for c in COLUMNS], observed=True):
        ref = column.index[is_reference[column.index]]
        if len(ref) != 1 or not column.loc[ref[0], "competes"]:
            continue
        base = column["values"][ref[0]]
        members = column[column["competes"] & ~is_reference[column.index]]
        # every member of the declared family counts, tested or not yet (m stays fixed)
        tests = {
            index: sequential_test(cell, column["ordered"][ref[0]])
            for index, cell in members["ordered"].items()
        }
        for index, verdict in verdicts(tests).items():
            difference = verdict.difference
            undecided = ALPHA / max(1, verdict.m)  # Holm's first step, as bold's hint
            found[index] = {
                "diff": difference.diff,
                "low": difference.low,
                "high": difference.high,
                "confidence": verdict.confidence,
                "p_holm": verdict.p_adjusted,
                "family": verdict.m,
                "seeds": verdict.seeds,
                "seeds_to_decide": np.nan
                if verdict.decided
                else seeds_to_decide(members["values"][index], base, undecided),
                "decided": verdict.decided,
            }
    if found:
        values = pd.DataFrame.from_dict(found, orient="index")
        out.loc[values.index, values.columns] = values
    out["decided"] = out["decided"].astype(bool)
    return out


def comparisons(
    whole: Ablation, text: str, compare: str | None, shown: dict[str, str]
) -> tuple[pd.DataFrame, dict[str, str], str]:
    """``--reference text``'s comparisons over ``whole`` (every row, before ``--filter
    pe=...``), Holm over the declared family (``compare``: ``--compare``), then narrowed to the
    rows ``shown``; the reference row and the family in words."""
    wanted = parse_reference(text, whole.rows, whole.by_task)
    family, named = compared_rows(whole.by_task, whole.rows, wanted, compare)
    compared = versus(whole.by_task, whole.rows, wanted, family)
    if shown:
        keep = compared["reference"] | np.logical_and.reduce(
            [compared[k].astype(str).isin(alternatives(v)) for k, v in shown.items()]
        )
        compared = compared[keep]
    return compared, wanted, named
