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
``table_vs_<reference>.{md,tex,csv}``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pelab.analysis.baseline import ORIGIN, YOURS
from pelab.analysis.cells import NO_RUNS, decide_text, metric_name
from pelab.analysis.collect import alternatives
from pelab.analysis.latex_layout import for_pdflatex, latex_escape
from pelab.analysis.render import paper_rows
from pelab.analysis.sequential import (
    ALPHA,
    LOOKS,
    seeds_to_decide,
    sequential_test,
    shares,
    verdicts,
)
from pelab.analysis.table import Ablation
from pelab.errors import ConfigError

COLUMNS = ["task", "split", "metric"]
DECIDED, LATEX_DECIDED = "✓", r"$\surd$"  # pdflatex has no ✓ without a package; √ it has


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


def points(value: float) -> str:
    """A bound in points, ``+12.3``; one that rounds to zero keeps its sign and two digits
    (``+0.04``), so whether an interval excludes 0 reads as it is."""
    text = f"{value * 100:+.1f}"
    if value != 0 and float(text) == 0:
        text = f"{value * 100:+.2g}"
    return text


def comparison_text(cell: pd.Series) -> str:
    """``+36.7 [+30.1, +43.2] p=0.0003 (Holm over 2) ✓``; ``-2.1 [-9.0, +4.9] p=1 (Holm over
    2) · 10 seeds decide``; ``at 5 seeds`` when a later look is shown."""
    if cell["reference"]:
        return "reference"
    if np.isnan(cell["diff"]):
        return "–"
    p = f"{cell['p_holm']:.2g}"
    if (float(p) < ALPHA) != cell["decided"]:  # 0.0498 would print 0.05 beside a ✓
        p = f"{cell['p_holm']:.4g}"
    text = (
        f"{cell['diff'] * 100:+.1f} [{points(cell['low'])}, {points(cell['high'])}] "
        f"p={p} (Holm over {cell['family']:.0f})"
    )
    if cell["seeds"] > LOOKS[0]:
        text += f" at {cell['seeds']:.0f} seeds"
    return f"{text} {DECIDED}" if cell["decided"] else text + decide_text(cell["seeds_to_decide"])


def caption(compared: pd.DataFrame, reference: dict[str, str], family: str) -> str:
    """What a comparison table's cells mean: the family, the design, the interval's level."""
    name = ", ".join(f"{k}={v}" for k, v in reference.items())
    metric = metric_name(str(compared["metric"].iloc[0])) if len(compared) else ""
    tested = compared["diff"].notna()
    spent = ", ".join(f"{share * ALPHA:.4f}" for share in shares(LOOKS))
    return (
        f"Test {metric}: each row minus the reference row ({name}), in points. The family, per "
        f"column: {family} vs the reference, adjusted by Holm's method over its m comparisons "
        "('Holm over m', beside each p; rows shown or hidden by --filter do not change it). "
        f"Each comparison is Welch's t-test at the planned looks both cells reached "
        f"({', '.join(map(str, LOOKS))} seeds per cell, each cell's first seeds; alpha = "
        f"{ALPHA} spent {spent} by Lan-DeMets' Pocock-type function), so seeds added after "
        "looking keep the error rate; p: Holm's adjusted sequential p. The interval is Welch's "
        "at the level of the verdict (Holm's level times the look's share of alpha), so it "
        "excludes 0 exactly where ✓ (significant at 5%); 'at k seeds': the look shown, when "
        "not the first; 'k seeds decide': the planned look at which the observed difference "
        "would be significant with 80% power (both cells' observed variances taken as true). "
        f"{int(compared['decided'].sum())} of {int(tested.sum())} comparisons decided."
    )


def compact_text(cell: pd.Series) -> str:
    """A paper's cell: ``+36.7 [+30.1, +43.2] ✓``, ``-2.1 [-9.0, +4.9]`` (``.tex``)."""
    if cell["reference"] or np.isnan(cell["diff"]):
        return comparison_text(cell)
    text = f"{cell['diff'] * 100:+.1f} [{points(cell['low'])}, {points(cell['high'])}]"
    return f"{text} {DECIDED}" if cell["decided"] else text


def layout(compared: pd.DataFrame, rows: list[str], compact: bool = False) -> pd.DataFrame:
    """The comparisons as text (``compact_text`` where ``compact``), rows x columns
    (``task split``)."""
    text = compact_text if compact else comparison_text
    shown = compared.assign(text=compared.apply(text, axis=1))
    shown["column"] = shown[["task", "split"]].astype(str).agg(" ".join, axis=1)
    table = shown.pivot_table(
        index=rows, columns="column", values="text", aggfunc="first", sort=False
    ).fillna(NO_RUNS)
    table.columns.name = None  # no header cell of its own
    return table


def markdown(compared: pd.DataFrame, rows: list[str], reference: dict[str, str], family: str):
    """The comparisons of one metric as a markdown table with its caption."""
    body = layout(compared, rows).reset_index().to_markdown(index=False, disable_numparse=True)
    return f"{body}\n\n{caption(compared, reference, family)}\n"


def paper_caption(compared: pd.DataFrame, reference: dict[str, str]) -> str:
    """``caption`` in a paper's words: what a cell holds and how it was tested, briefly."""
    name = ", ".join(f"{k}={v}" for k, v in reference.items())
    metric = metric_name(str(compared["metric"].iloc[0])) if len(compared) else ""
    tested = compared["diff"].notna()
    return (
        f"Test {metric}: each row minus the reference ({name}), in points, with its interval at "
        f"the level of its verdict. {DECIDED}: significantly different at 5% (Welch's t-test "
        f"at the planned looks of {', '.join(map(str, LOOKS))} seeds per cell, alpha spent by "
        "Lan-DeMets' Pocock-type function, Holm's correction over each column's comparisons "
        "with the reference); the interval excludes 0 exactly there. "
        f"{int(compared['decided'].sum())} of {int(tested.sum())} comparisons decided."
    )


def latex(
    compared: pd.DataFrame,
    rows: list[str],
    reference: dict[str, str],
    span: str = "auto",
    renames: dict[str, str] | None = None,
) -> str:
    """The comparisons of one metric for pdflatex, its rows as a paper names them
    (``render.paper_rows``), every name escaped, labelled ``tab:table_vs_<reference>``, laid
    out by ``latex_layout.for_pdflatex``."""
    table = paper_rows(layout(compared, rows, compact=True), renames or {})
    table.index = table.index.set_names([latex_escape(str(n)) for n in table.index.names])
    styler = table.style.format(escape="latex").format_index(escape="latex", axis=0)
    text = styler.format_index(escape="latex", axis=1).to_latex(
        hrules=True,
        caption=latex_escape(paper_caption(compared, reference)),
        label=f"tab:{stem(reference)}",
        position_float="centering",
        sparse_index=False,
    )
    return for_pdflatex(text.replace(DECIDED, LATEX_DECIDED), table, span)


def stem(reference: dict[str, str]) -> str:
    return "table_vs_" + "_".join(str(v) for v in reference.values())


def write(
    compared: pd.DataFrame,
    rows: list[str],
    reference: dict[str, str],
    metric: str,
    out_dir: Path,
    family: str,
    span: str = "auto",
    renames: dict[str, str] | None = None,
) -> list[Path]:
    """``table_vs_<reference>.{md,tex}`` (``metric``'s comparisons: the table's first metric;
    ``span``: ``render.SPANS``) and ``.csv`` (every metric's) in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    mine = compared[compared["metric"] == metric]
    paths = [out_dir / f"{stem(reference)}.{suffix}" for suffix in ("md", "tex", "csv")]
    paths[0].write_text(markdown(mine, rows, reference, family))
    paths[1].write_text(latex(mine, rows, reference, span, renames))
    compared.to_csv(paths[2], index=False)
    return paths


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
