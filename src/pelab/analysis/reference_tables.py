"""The tables of rows against a reference row (``pelab.analysis.reference``'s comparisons):
``table_vs_<reference>.md`` (each cell's difference, interval, p and Holm's family), ``.tex``
(compact cells for a paper) and ``.csv`` (every metric's), and the layout the HTML report
shows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pelab.analysis.cells import NO_RUNS, decide_text, metric_name
from pelab.analysis.latex_layout import for_pdflatex, latex_escape
from pelab.analysis.render import paper_rows
from pelab.analysis.sequential import ALPHA, LOOKS, shares

DECIDED, LATEX_DECIDED = "✓", r"$\surd$"  # pdflatex has no ✓ without a package; √ it has


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
