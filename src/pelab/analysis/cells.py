"""A table cell as text, and the words of a cell without a score.

``cell_text``: the mean over seeds with its 95% interval in percent, clipped to [0, 100], and
``k/n``: seeds with a result out of the seeds in the cell's grid, so a failed, crashed or missing
run is counted in its cell. An out-of-distribution cell whose seeds all failed to learn the task
reads ``not learned (ID <its in-distribution mean>, 0/n)``, a cell with some unlearned seeds adds
``learned k/n``, a cell without runs reads ``not run``. ``pivot`` lays the cells out rows x
columns, ``column_header`` names a column, ``column_notes`` says why a column has no bold.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pelab.analysis.sequential import LOOKS

NO_RUNS = "not run"  # a cell no run belongs to
NOT_LEARNED = "not learned"  # an OOD cell whose seeds all failed to learn the task
NOTHING_MEASURED = "n/a"  # a cell whose runs completed with nothing to measure
# what a cell without a score means, by the word it shows (a heatmap's grey cells)
NO_SCORE_MEANINGS = {
    NOT_LEARNED: "no seed learned the task in distribution, so its score here measures nothing",
    NO_RUNS: "no run of this setting",
    NOTHING_MEASURED: "its runs had nothing to measure",
}


def metric_name(metric: str) -> str:
    """A metric as tables and figures name it: ``token_acc`` -> ``token acc``."""
    return metric.replace("_", " ")


def no_score(cell: pd.Series) -> str | None:
    """Why a cell has no score to show, or None: ``NOT_LEARNED`` (out of distribution, no seed
    learned the task in distribution), its runs' statuses (``failed``, ``missing``, ``running,
    failed``) or ``NOTHING_MEASURED`` (completed, e.g. without an out-of-distribution length)."""
    if cell["n"] > 0:
        unlearned = cell.get("judged", 0) and not cell.get("learned", 0)
        return NOT_LEARNED if unlearned and cell.get("split") == "OOD" else None
    return cell["not_completed"] or NOTHING_MEASURED


def cell_text(cell: pd.Series, compact: bool = False) -> str:
    """``97.1 [95.0, 99.2] (3/3)``: the mean and its 95% interval in percent (clipped to
    [0, 100]; ``[–]`` for one seed), with ``learned k/n`` when some seeds did not learn the task;
    ``not learned (ID 64.2, 0/3)`` for an out-of-distribution cell whose seeds all failed to
    learn it; without a result the statuses of the runs, e.g. ``failed (0/3)``, ``running
    (0/3)``, ``missing (0/3)``; ``n/a`` when the runs completed but had nothing to measure (e.g.
    no out-of-distribution length). ``compact`` (a paper's table): the mean and its interval,
    or the word alone."""
    word = no_score(cell)
    if compact and word:
        return word
    if word == NOT_LEARNED:
        return f"{NOT_LEARNED} (ID {_percent(cell['id_mean'])}, 0/{cell['judged']})"
    if word == NOTHING_MEASURED:
        return word
    if word:
        return f"{word} ({cell['n']}/{cell['runs']})"
    judged, learned = cell.get("judged", 0), cell.get("learned", 0)
    low, high = cell["ci95_low"], cell["ci95_high"]  # clipped to [0, 1] (``cell_stats``)
    interval = "[–]" if np.isnan(low) else f"[{low * 100:.1f}, {high * 100:.1f}]"
    if compact:
        return f"{cell['mean'] * 100:.1f} {interval}"
    partly = f", learned {learned}/{judged}" if learned < judged else ""
    text = f"{cell['mean'] * 100:.1f} {interval} ({cell['n']}/{cell['runs']}{partly})"
    return text + decide_text(cell.get("seeds_to_decide", np.nan))


def decide_text(seeds: float) -> str:
    """What would decide an undecided comparison: `` · 10 seeds decide`` (the planned look, in
    seeds per cell, ``sequential.seeds_to_decide``), `` · >10 seeds`` when no planned look
    would (``sequential.LOOKS``); nothing for a comparison that is not undecided."""
    if pd.isna(seeds):
        return ""
    return f" · >{LOOKS[-1]} seeds" if np.isinf(seeds) else f" · {seeds:.0f} seeds decide"


def pivot(
    stats: pd.DataFrame, rows: list[str], cols: list[str], compact: bool = False
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The cell texts (``cell_text``, ``compact`` or not) and the ``best`` flags, rows x
    columns; a row ``chance`` holds the chance level of each column when the runs recorded one,
    and a row ``detectable`` the smallest difference (points) each ranked column's seeds could
    detect (``statistics.detectable``)."""
    texts = stats.assign(text=stats.apply(cell_text, axis=1, compact=compact))
    table = texts.pivot(index=rows, columns=cols, values="text").fillna(NO_RUNS)
    best = texts.pivot(index=rows, columns=cols, values="best").fillna(False).astype(bool)
    for name, shown in (("chance", _percent), ("detectable", _points)):
        per_column = stats.groupby(cols, observed=True)[name].first() if name in stats else None
        if per_column is None or not per_column.notna().any():
            continue
        label = [(name, *[""] * (len(rows) - 1))]
        index = (
            pd.MultiIndex.from_tuples(label, names=rows)
            if len(rows) > 1
            else pd.Index([name], name=rows[0])
        )
        row = [per_column.reindex(table.columns).map(shown).tolist()]
        table = pd.concat([table, pd.DataFrame(row, index=index, columns=table.columns)])
        best = pd.concat([best, pd.DataFrame(False, index=index, columns=best.columns)])
    return table, best


def _points(value: float) -> str:
    """A detectable difference: ``±12.3`` points; ``–`` for a column that does not rank."""
    return "–" if pd.isna(value) else f"±{value * 100:.1f}"


def _percent(value: float) -> str:
    return "–" if pd.isna(value) else f"{value * 100:.1f}"


def column_header(column: tuple, stats: pd.DataFrame) -> tuple[str, ...]:
    """A column's header, one level per key: ``("copy", "OOD")``; a length with its split,
    ``("copy", "L=32 (OOD)")``; a metric by name, ``("copy", "OOD", "token acc")``."""
    task, second, *metric = column
    if not isinstance(second, str):
        at = (stats["task"] == task) & (stats["length"] == second)
        second = f"L={second} ({stats.loc[at, 'split'].iloc[0]})"
    return (str(task), second, *map(metric_name, metric))


def column_label(column: tuple, stats: pd.DataFrame) -> str:
    """``copy OOD``, ``copy L=32 (OOD)``, ``copy OOD token acc``: ``column_header`` in a line."""
    return " ".join(column_header(column, stats))


def column_notes(stats: pd.DataFrame, cols: list[str]) -> list[str]:
    """Why a column with results has no bold cell, one line per reason: its competing cells all
    show one value (``every cell is 0.0``), or no row's seeds all learned the task (out of
    distribution only those compete)."""
    reasons: dict[str, list[str]] = {}
    for key, column in stats.groupby(cols, observed=True, sort=False):
        if column["best"].any() or not column["n"].gt(0).any():
            continue
        shown = column.loc[column["competes"], "mean"].mul(100).round(1).unique()
        if not len(shown):
            why = "no row's seeds all learned the task (only those compete out of distribution)"
        elif column["competes"].eq(column["n"].gt(0)).all():
            why = f"every cell is {shown[0]:.1f}"
        else:
            why = f"every cell whose seeds all learned the task is {shown[0]:.1f}"
        reasons.setdefault(why, []).append(column_label(key, stats))
    return [f"No bold in {', '.join(labels)}: {why}." for why, labels in reasons.items()]


def steps_text(cell: pd.Series) -> str:
    """``1250 ± 180 (3/3)``; ``not learned (0/3)``."""
    if not cell["learned"]:
        return f"not learned (0/{cell['judged']})"
    std = "–" if np.isnan(cell["std"]) else f"{cell['std']:.0f}"
    return f"{cell['mean']:.0f} ± {std} ({cell['learned']}/{cell['judged']})"
