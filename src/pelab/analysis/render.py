"""An ablation's tables as files (``write_tables``): each as Markdown (with its caption, why a
column has no bold, the legend and every run that did not complete), LaTeX (bold cells in
``\\textbf``) and CSV (every cell's statistics, one row each: the mean, the standard deviation,
the unclipped interval, the best seed, ``n``, ``learned``, ``p_vs_top``); the steps to learn as
Markdown and CSV.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from pelab.analysis.baseline import ORIGIN
from pelab.analysis.cells import (
    NO_RUNS,
    column_header,
    column_label,
    column_notes,
    pivot,
    steps_text,
)
from pelab.analysis.latex_layout import for_pdflatex, latex_escape
from pelab.analysis.sequential import ALPHA, LOOKS, shares
from pelab.analysis.table import Ablation


def to_markdown(stats: pd.DataFrame, rows: list[str], cols: list[str]) -> str:
    table, best = pivot(stats, rows, cols)
    table = table.where(~best, "**" + table + "**")
    table.columns = [column_label(c, stats) for c in table.columns]
    return table.reset_index().to_markdown(index=False, disable_numparse=True)


# what a .tex table's compact cells hold, in its caption
LATEX_CELLS = (
    "Cells: mean over seeds with its 95% interval; bold: the best and every cell not "
    "significantly below it (Welch's t-test at the planned looks of 3, 5 and 10 seeds, Holm's "
    "correction over the column's comparisons with its best)."
)
LOOKS_NOTE = (
    "Looks recorded (seeds added after looking at a table; every test counts each planned look, "
    "taken or not, so none changes a verdict's error rate)"
)


def to_latex(
    stats: pd.DataFrame,
    rows: list[str],
    cols: list[str],
    caption: str,
    label: str,
    span: str,
    renames: dict[str, str] | None = None,
) -> str:
    r"""The table for pdflatex: its rows as a paper names them (``paper_rows``), every name
    escaped (``run_name``, ``model.net.attn_scale``), the row labels repeated rather than
    ``\multirow`` (no package beyond ``LATEX_PACKAGES``, named in its first line), laid out by
    ``for_pdflatex``."""
    table, best = pivot(stats, rows, cols, compact=True)
    table = paper_rows(table, renames or {})
    table.columns = pd.MultiIndex.from_tuples([column_header(c, stats) for c in table.columns])
    table.index = table.index.set_names([latex_escape(str(n)) for n in table.index.names])
    styler = table.style.format(escape="latex")
    styler = styler.format_index(escape="latex", axis=0).format_index(escape="latex", axis=1)
    styler = styler.apply(lambda _: np.where(best, "textbf:--rwrap;", ""), axis=None)
    latex = styler.to_latex(
        hrules=True,
        caption=latex_escape(f"{caption} {LATEX_CELLS}"),
        label=f"tab:{label}",
        multicol_align="c",
        position_float="centering",
        sparse_index=False,
    )
    return for_pdflatex(latex, table, span)


def not_completed(runs: pd.DataFrame, rows: list[str]) -> list[str]:
    """One line per run that did not complete: its setting, status, error and where it lies."""
    lines = []
    for _, run in runs[runs["status"] != "completed"].iterrows():
        name = " · ".join(str(run[c]) for c in [*rows, "task"])
        error = str(run["error"]).strip().splitlines()[0] if run["error"] else ""
        where = f" ({run['source']})" if isinstance(run["source"], str) and run["source"] else ""
        lines.append(f"{name} · seed {run['seed']}: {run['status']}: {error[:200]}{where}")
    return lines


def paper_rows(table: pd.DataFrame, renames: dict[str, str]) -> pd.DataFrame:
    """``table`` with its rows as a paper names them: ``--label``'s ``renames`` of a row's
    value (``rope=RoPE``, ``yours=ours``) or setting (``attn_scale=logn=log n``); the
    ``origin`` column left out where the rows are told apart without it (as the figures say
    whose a row is only where a label is shared)."""
    index = table.index.to_frame(index=False).astype(str)
    if ORIGIN in index and len(index.columns) > 1:
        rest = index.drop(columns=ORIGIN)
        if not rest.duplicated().any():
            index = rest
    for column in index:
        short = column.rsplit(".", 1)[-1]
        index[column] = [renames.get(f"{short}={v}", renames.get(v, v)) for v in index[column]]
    shown = table.copy()
    shown.index = (
        pd.MultiIndex.from_frame(index)
        if len(index.columns) > 1
        else pd.Index(index.iloc[:, 0], name=index.columns[0])
    )
    return shown


def write_tables(
    result: Ablation,
    out_dir: Path,
    looks: Sequence[str] = (),
    span: str = "auto",
    renames: dict[str, str] | None = None,
) -> list[Path]:
    """Each table (``Ablation.side_by_side``, ``Ablation.per_metric``) as ``.md`` (with its
    caption, why a column has no bold, the legend, the ``looks`` recorded and every run that
    did not complete), ``.tex`` (``span``: ``SPANS``; labelled ``tab:<stem>``) and ``.csv``
    (the cell statistics, one row per cell) in ``out_dir``."""
    problems = not_completed(result.runs, result.rows)
    notes = [LEGEND, ""]
    if looks:
        notes += [f"{LOOKS_NOTE}:", "", *(f"- {line}" for line in looks), ""]
    if problems:
        notes += [f"Not completed ({len(problems)} of {len(result.runs)} runs):", ""]
        notes += [f"- {p}" for p in problems]
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for table in [*result.side_by_side(), *result.per_metric()]:
        markdown = to_markdown(table.stats, result.rows, table.cols)
        why = column_notes(table.stats, table.cols)
        text = "\n".join([markdown, "", table.caption, "", *why, *([""] if why else []), *notes])
        written.append(_write(out_dir / f"{table.stem}.md", text + "\n"))
        latex = to_latex(
            table.stats, result.rows, table.cols, table.paper_caption, table.stem, span, renames
        )
        written.append(_write(out_dir / f"{table.stem}.tex", latex))
        table.stats.drop(columns=["values", "ordered"]).to_csv(
            out_dir / f"{table.stem}.csv", index=False
        )
        written.append(out_dir / f"{table.stem}.csv")
    if result.steps is not None:
        table = steps_markdown(result.steps, result.rows)
        written.append(_write(out_dir / "table_steps.md", f"{table}\n\n{STEPS_LEGEND}\n"))
        latex = steps_latex(result.steps, result.rows, span, renames)
        written.append(_write(out_dir / "table_steps.tex", latex))
        result.steps.to_csv(out_dir / "table_steps.csv", index=False)
        written.append(out_dir / "table_steps.csv")
    return written


DESIGN = (
    f"at the planned looks ({', '.join(map(str, LOOKS))} seeds per cell, each cell's first "
    f"seeds; alpha = {ALPHA} spent {', '.join(f'{x * ALPHA:.4f}' for x in shares(LOOKS))} by "
    "Lan-DeMets' Pocock-type function, so seeds added after looking keep the error rate)"
)
LEGEND = (
    "Metrics: exact match, the whole answer right; token acc, the share of answer tokens right "
    "(both greedy). Cells: mean over seeds in percent, with its 95% confidence interval "
    "(Student's t-interval over the seeds, clipped to [0, 100]; [–]: one seed) (k/n: seeds with "
    "a result / seeds in the grid; learned k/n: seeds that learned the task in distribution, "
    "under a competence budget). **Bold**: the best mean of the column and every cell not "
    f"significantly different from it: Welch's t-test, two-sided, {DESIGN}, Holm's correction "
    "over the column's m comparisons with its best, m the competing cells shown less one (the "
    "CSV's family): a table of other rows ranks anew; a cell or a best short of the first "
    "look's seeds cannot be told apart and stays bold); in "
    "an OOD column only cells whose seeds all learned the task compete; a column whose "
    "competing cells all show one value (e.g. 0.0) has no bold. ID: mean over the evaluation "
    "lengths inside the training range; OOD: over the longer ones; not learned: no seed "
    "learned the task, so its OOD score measures nothing (its ID mean is shown); not run: no "
    "run of this setting. What a column cannot tell yet: detectable, the smallest difference "
    "(points) its seeds would find with 80% power (Welch's test at the Holm level of the "
    "column's first comparison, alpha/m, times the share of alpha of the look its cells "
    "reached, both cells at the column's mean observed variance); 'k seeds decide' beside a "
    "bold cell that is not the best: the planned look (seeds per cell) at which its observed "
    "difference from the best would be significant with 80% power, its and the best's "
    f"observed variances taken as true (an estimate from few seeds), '>{LOOKS[-1]} seeds': "
    "no planned look would. A question of one row against another is answered by "
    "--reference, whose family is declared (table_vs_<reference>). The CSV files hold every "
    "number (metric, mean, std, ci95_low, ci95_high, n, learned, p_vs_top, family, "
    "seeds_to_decide, detectable)."
)
STEPS_LEGEND = (
    "Steps to learn (competence budget, `learned_at`): the training step at which in-distribution "
    "validation first met the criterion for good, mean ± standard deviation over the seeds that "
    "learned (k/n: seeds that learned / seeds with a criterion); not learned: none did within "
    "trainer.max_steps."
)


def steps_table(steps: pd.DataFrame, rows: list[str]) -> pd.DataFrame:
    """The steps-to-learn table, rows x tasks, ``not run`` where a row has no run of a task."""
    texts = steps.assign(text=steps.apply(steps_text, axis=1))
    return texts.pivot(index=rows, columns="task", values="text").fillna(NO_RUNS)


def steps_markdown(steps: pd.DataFrame, rows: list[str]) -> str:
    return steps_table(steps, rows).reset_index().to_markdown(index=False, disable_numparse=True)


def steps_latex(
    steps: pd.DataFrame, rows: list[str], span: str = "auto", renames: dict | None = None
) -> str:
    """The steps-to-learn table for pdflatex, as ``to_latex`` writes the others."""
    table = paper_rows(steps_table(steps, rows), renames or {})
    table.index = table.index.set_names([latex_escape(str(n)) for n in table.index.names])
    styler = table.style.format(escape="latex").format_index(escape="latex", axis=0)
    latex = styler.format_index(escape="latex", axis=1).to_latex(
        hrules=True,
        caption=latex_escape(
            "Training steps to learn each task in distribution: mean ± standard deviation over "
            "the seeds that learned it (k/n: the seeds that learned, of those with a competence "
            "budget)."
        ),
        label="tab:table_steps",
        position_float="centering",
        sparse_index=False,
    )
    return for_pdflatex(latex, table, span)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
