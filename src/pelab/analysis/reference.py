"""Every row against a fixed reference row (``make_table.py --reference pe=rope``): what decides
where the comparison with a column's best cannot. The best of a column is often a cell whose
seeds disagree (DAPE on copy: 73.6 [41.8, 100.0]), so little can be told from it; a reference
such as RoPE or NoPE is usually steadier, and the question "does this encoding beat RoPE?" is
the one a reader asks.

Per column (task, split, metric): each row's difference of means from the reference's, with its
95% Welch interval (``welch_difference``), Welch's p Holm-adjusted over the column's comparisons
(``significance``), and, for an undecided one, the seeds per cell that would decide the observed
difference with 80% power at the column's Holm level (``seeds_to_decide``). Only cells that
compete (``mark_best``: in an out-of-distribution column, seeds that all learned) are compared.
Written as ``table_vs_<reference>.{md,csv}``."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pelab.analysis.cells import NO_RUNS, decide_text, metric_name
from pelab.analysis.power import seeds_to_decide
from pelab.analysis.statistics import ALPHA, significance, welch_difference
from pelab.errors import ConfigError

COLUMNS = ["task", "split", "metric"]


def parse_reference(text: str, rows: list[str], stats: pd.DataFrame) -> dict[str, str]:
    """``pe=rope`` (or ``pe=rope,model.net.attn_scale=none``) -> ``{"pe": "rope", ...}``, a row
    of the table; a ``ConfigError`` naming the rows there are otherwise."""
    wanted = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
    if not wanted or set(wanted) - set(rows):
        raise ConfigError(
            f"--reference {text}: give the reference row as <setting>=<value>[,...] over the "
            f"table's row settings {', '.join(rows)}, e.g. --reference pe=rope"
        )
    match = np.logical_and.reduce([stats[k].astype(str).eq(v) for k, v in wanted.items()])
    if not match.any():
        have = sorted({" ".join(f"{k}={r[k]}" for k in wanted) for _, r in stats.iterrows()})
        raise ConfigError(f"--reference {text}: no such row; the table has {', '.join(have)}")
    return wanted


def versus(stats: pd.DataFrame, rows: list[str], reference: dict[str, str]) -> pd.DataFrame:
    """Each competing cell of ``stats`` (``Ablation.by_task`` after ``mark_best``) against the
    reference row's cell of its column: ``diff``, ``low``, ``high`` (fractions), ``p_holm``,
    ``decided`` and ``seeds_to_decide``; the reference's own cells and cells that cannot be
    compared (fewer than two seeds, not competing) have NaN."""
    is_reference = np.logical_and.reduce(
        [stats[k].astype(str).eq(v) for k, v in reference.items()]
    )
    out = stats[[*rows, *COLUMNS, "n"]].copy()
    for name in ("diff", "low", "high", "p_holm", "seeds_to_decide"):
        out[name] = np.nan
    out["decided"] = False
    out["reference"] = is_reference
    for _, column in stats.groupby([stats[c] for c in COLUMNS], observed=True):
        ref = column.index[is_reference[column.index]]
        usable = column[column["competes"] & column["n"].ge(2)]
        if len(ref) != 1 or ref[0] not in usable.index:
            continue
        leader = ref[0]
        adjusted = significance(usable["values"], leader)
        level = ALPHA / max(1, len(usable) - 1)
        base = np.asarray(usable["values"][leader], dtype=float)
        for index in usable.index.drop(leader):
            cell = np.asarray(usable["values"][index], dtype=float)
            difference = welch_difference(cell, base)
            p = adjusted[index]
            if np.isnan(p):  # both without spread: equal (p 1) or apart (p 0), no test needed
                p = difference.p_value
            out.loc[index, ["diff", "low", "high", "p_holm"]] = [
                difference.diff, difference.low, difference.high, p,
            ]  # fmt: skip
            out.loc[index, "decided"] = bool(p < ALPHA)
            if not p < ALPHA:
                out.loc[index, "seeds_to_decide"] = seeds_to_decide(cell, base, level)
    return out


def comparison_text(cell: pd.Series) -> str:
    """``+36.7 [+32.1, +41.2] p=0.0003 ✓``; ``-2.1 [-8.0, +3.9] p=1 · 40 seeds decide``."""
    if cell["reference"]:
        return "reference"
    if np.isnan(cell["diff"]):
        return "–"
    text = (
        f"{cell['diff'] * 100:+.1f} [{cell['low'] * 100:+.1f}, {cell['high'] * 100:+.1f}] "
        f"p={cell['p_holm']:.2g}"
    )
    return f"{text} ✓" if cell["decided"] else text + decide_text(cell["seeds_to_decide"])


def markdown(compared: pd.DataFrame, rows: list[str], reference: dict[str, str]) -> str:
    """The comparisons of one metric as a markdown table, rows x columns (``task split``), with
    its caption and how many comparisons decided."""
    shown = compared.assign(text=compared.apply(comparison_text, axis=1))
    shown["column"] = shown[["task", "split"]].astype(str).agg(" ".join, axis=1)
    table = shown.pivot_table(
        index=rows, columns="column", values="text", aggfunc="first", sort=False
    ).fillna(NO_RUNS)
    tested = compared["diff"].notna()
    name = ", ".join(f"{k}={v}" for k, v in reference.items())
    metric = metric_name(str(compared["metric"].iloc[0])) if len(compared) else ""
    caption = (
        f"Test {metric}: each row minus the reference row ({name}), in points, with the 95% "
        "Welch interval and "
        "Welch's p, Holm-adjusted over each column's comparisons; ✓: significant at 5%; "
        "'k seeds decide': the seeds per cell at which the observed difference would be "
        "significant with 80% power (both cells' observed variances taken as true). "
        f"{int(compared['decided'].sum())} of {int(tested.sum())} comparisons decided."
    )
    body = table.reset_index().to_markdown(index=False, disable_numparse=True)
    return f"{body}\n\n{caption}\n"


def write(
    compared: pd.DataFrame, rows: list[str], reference: dict[str, str], metric: str, out_dir
) -> list:
    """``table_vs_<reference>.md`` (``metric``'s comparisons: the table's first metric) and
    ``.csv`` (every metric's) in ``out_dir``."""
    stem = "table_vs_" + "_".join(str(v) for v in reference.values())
    md, csv = out_dir / f"{stem}.md", out_dir / f"{stem}.csv"
    md.write_text(markdown(compared[compared["metric"] == metric], rows, reference))
    compared.to_csv(csv, index=False)
    return [md, csv]
