"""Ablation tables: one row per encoding (and per any other setting the runs vary), one column
per task, split (in- / out-of-distribution mean) and metric, or per task, evaluation length and
metric. Every metric is tabulated: side by side (``table_tasks``), and each alone
(``table_tasks.token_acc``), so no metric's table replaces another's.

A cell aggregates the seeds of its setting: the mean with its 95% confidence interval (Student's
t-interval over the seeds, ``mean ± t(0.975, n-1) · std / √n``, clipped to [0, 100] %; none for
one seed), and ``k/n``: seeds with a result out of the seeds in the cell's grid: the runs found
and the jobs their sweep planned (``collect``), so a failed, crashed or missing run is counted in
its cell and listed under the table, never dropped; no run is invented where no sweep planned one
(a cell without runs reads ``not run``). The CSV adds the standard deviation (``ddof=1``), the
best seed and the unclipped interval.

Bold marks the best mean of a column and every cell not significantly different from it:
Welch's t-test against the best cell's seeds, two-sided, α = 0.05, Holm's correction over the
column's comparisons (``significance``). A cell with fewer than two seeds, or a best cell with
fewer than two, cannot be told apart and stays bold with it; so with one seed per cell, every
cell is bold or none is compared, and the table says so. A column of one value, or whose best
competing cell is 0.0, has no bold, and a note under the table says why (``column_notes``).

Runs under a competence budget (``learned_at``, ``pelab.competence``) say whether they learned
their task in distribution. An out-of-distribution score of a model that never learned the task
measures nothing: such a cell reads ``not learned (ID <its in-distribution mean>, 0/n)``, a
cell with some unlearned seeds adds ``learned k/n``, and only cells whose seeds all learned take
part in the ranking (bold) of an out-of-distribution column. ``steps_stats`` tabulates the
steps each encoding needed to learn each task.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from pelab.analysis.baseline import with_origin
from pelab.analysis.collect import NOT_SET, RUN_FIELDS, SPLITS
from pelab.errors import ConfigError
from pelab.metrics import METRICS

SPLIT_NAMES = {"id": "ID", "ood": "OOD"}
ALPHA = 0.05  # the significance level of bold: not significantly different from the best
NO_RUNS = "not run"  # a cell no run belongs to
NOT_LEARNED = "not learned"  # an OOD cell whose seeds all failed to learn the task
NOTHING_MEASURED = "n/a"  # a cell whose runs completed with nothing to measure


def metric_name(metric: str) -> str:
    """A metric as tables and figures name it: ``token_acc`` -> ``token acc``."""
    return metric.replace("_", " ")


def metric_order(first: str) -> list[str]:
    """Every metric (``METRICS``), ``first`` first."""
    if first not in METRICS:
        raise ConfigError(f"unknown metric {first!r}; valid choices: {', '.join(METRICS)}")
    return [first, *(m for m in METRICS if m != first)]


def settings(runs: pd.DataFrame) -> list[str]:
    """The choice and override columns of ``runs`` (everything that defines a run but the seed)."""
    return [c for c in runs.columns if c not in RUN_FIELDS]


def row_axes(runs: pd.DataFrame) -> list[str]:
    """``pe``, then every other setting that differs between the runs, ``task`` aside."""
    varying = [c for c in settings(runs) if c not in ("pe", "task") and runs[c].nunique() > 1]
    return ["pe", *varying]


def fixed_settings(runs: pd.DataFrame) -> dict[str, str]:
    """The settings every run shares (``NOT_SET`` ones left out): the table's caption."""
    return {
        c: str(runs[c].iloc[0])
        for c in settings(runs)
        if runs[c].nunique() == 1 and runs[c].iloc[0] != NOT_SET
    }


def complete(runs: pd.DataFrame, rows: list[str]) -> pd.DataFrame:
    """``runs`` with one run per (row, task, seed): duplicates keep the last completed run
    (``source`` order: newest sweep last). Nothing is invented: a sweep's planned jobs that
    never ran are already there as ``missing`` runs (``collect``), and a cell no run belongs to
    (runs browsed from unrelated sources) stays empty (``NO_RUNS``). The index stays the run id
    that ``collect.lengths_frame`` refers to."""
    keys = [*rows, "task", "seed"]
    ranked = runs.assign(_done=runs["status"].eq("completed")).sort_values(
        ["_done", "source"], kind="stable"
    )
    return ranked[~ranked.duplicated(keys, keep="last")].drop(columns="_done").sort_index()


def cell_stats(frame: pd.DataFrame, rows: list[str], cols: list[str], value: str) -> pd.DataFrame:
    """Per (row, column) cell: ``mean``, ``std``, ``max`` and ``n`` of ``value`` over the
    completed runs, ``runs`` (all, failed and missing included), ``failed`` (failed, crashed or
    still running), ``missing``, ``not_completed`` (those runs' statuses, e.g. ``failed,
    running``) and ``best`` (the column's best mean). Rows and columns keep their order of
    appearance."""
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
    stats = (
        data.groupby([*rows, *cols], observed=True)
        .agg(
            mean=("_value", "mean"),
            std=("_value", "std"),
            max=("_value", "max"),
            n=("_value", "count"),
            values=("_value", lambda v: tuple(v.dropna())),
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
    return stats.assign(ci95_low=low, ci95_high=high)


def t_interval(mean: pd.Series, std: pd.Series, n: pd.Series) -> tuple[pd.Series, pd.Series]:
    """The 95% Student's t-interval of a mean over ``n`` seeds; NaN for fewer than two."""
    dof = n.sub(1).where(n > 1)
    half = pd.Series(scipy_stats.t.ppf(0.975, dof), index=mean.index) * std / np.sqrt(n)
    return mean - half, mean + half


@dataclass(frozen=True)
class Difference:
    """An effect size: ``mean(a) - mean(b)`` with its 95% Welch interval and Welch's p-value."""

    diff: float
    low: float
    high: float
    p_value: float
    n_a: int
    n_b: int

    def __str__(self) -> str:
        return (
            f"{self.diff * 100:+.1f} points [{self.low * 100:+.1f}, {self.high * 100:+.1f}], "
            f"Welch p = {self.p_value:.3g} (n = {self.n_a} vs {self.n_b})"
        )


def welch_test(a, b):  # noqa: ANN201 (scipy's TtestResult)
    """``scipy.stats.ttest_ind(a, b, equal_var=False)``, without scipy's warning of "precision
    loss" for a side whose seeds all score the same (100% on every seed): its variance is
    exactly 0, which Welch's test takes as it is."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
        return scipy_stats.ttest_ind(a, b, equal_var=False)


def welch_difference(a, b) -> Difference:
    """The difference of two means over seeds, ``a - b``, with its 95% confidence interval
    (Welch-Satterthwaite degrees of freedom) and the two-sided p-value of Welch's t-test
    (``scipy.stats.ttest_ind(equal_var=False)``). Two sides without any spread: the interval
    is the difference itself, and p is 1 if it is zero, else 0."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"a difference needs two seeds on each side, got {len(a)} and {len(b)}")
    diff = a.mean() - b.mean()
    if a.var() == 0 and b.var() == 0:
        return Difference(diff, diff, diff, float(diff == 0), len(a), len(b))
    test = welch_test(a, b)
    interval = test.confidence_interval(confidence_level=0.95)
    return Difference(diff, interval.low, interval.high, float(test.pvalue), len(a), len(b))


def mark_best(stats: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """``top``: the column's best mean (at the displayed precision); ``p_vs_top``: Welch's
    t-test of each cell against it, Holm-corrected over the column (``significance``);
    ``best`` (bold): the top cell and every cell not significantly different from it;
    ``competes``: the cell takes part (it has a result and may rank in its column). Only
    columns with more than one value whose best competing cell is above 0.0 rank (a column of
    0.0 has no bold); in an out-of-distribution column only cells whose seeds all learned the
    task compete (every cell does when no run had a criterion)."""
    eligible = stats["split"].ne("OOD") | stats["learned"].eq(stats["judged"])
    eligible &= stats["n"].gt(0)
    shown = stats["mean"].mul(100).round(1)  # as displayed
    keys = [stats[c] for c in cols]
    top_value = shown.where(eligible).groupby(keys, observed=True).transform("max")
    varies = shown.groupby(keys, observed=True).transform("nunique").gt(1)
    ranks = varies & top_value.gt(0)
    top = eligible & shown.eq(top_value) & ranks
    p_values = pd.Series(np.nan, index=stats.index)
    for _, column in stats[eligible & ranks].groupby(keys, observed=True):
        leader = column.index[top[column.index]][0]
        p_values[column.index] = significance(column["values"], leader)
    best = top | (eligible & ranks & ~p_values.lt(ALPHA))
    return stats.assign(competes=eligible, top=top, p_vs_top=p_values, best=best)


def significance(values: pd.Series, leader) -> pd.Series:
    """Holm-adjusted p-values of Welch's two-sided t-test of each cell's seeds against the
    ``leader`` cell's (NaN for the leader, and where a test is impossible: fewer than two seeds
    on either side, or no variance in either with equal means)."""
    reference = np.asarray(values[leader], dtype=float)
    raw = {}
    for index, cell in values.items():
        cell = np.asarray(cell, dtype=float)
        if index == leader or len(cell) < 2 or len(reference) < 2:
            continue
        raw[index] = welch_test(cell, reference).pvalue
    tested = {i: p for i, p in raw.items() if not np.isnan(p)}
    adjusted = pd.Series(np.nan, index=values.index)
    running = 0.0  # Holm: the k-th smallest p times (m - k + 1), kept monotone, capped at 1
    for rank, (index, p) in enumerate(sorted(tested.items(), key=lambda item: item[1])):
        running = max(running, min(1.0, p * (len(tested) - rank)))
        adjusted[index] = running
    return adjusted


def id_means(runs: pd.DataFrame, rows: list[str], metrics: list[str]) -> pd.Series:
    """The in-distribution mean of each metric per row and task over the completed runs,
    indexed by row, task and metric."""
    done = runs[runs["status"].eq("completed")]
    means = done.groupby([*rows, "task"])[[f"id/{m}" for m in metrics]].mean()
    return _by_metric(means, "id/")


def chance_means(evaluated: pd.DataFrame, keys: list[str], metrics: list[str]) -> pd.Series:
    """The chance level of each metric averaged per ``keys`` (e.g. task and split), indexed by
    ``keys`` and metric."""
    means = evaluated.groupby(keys)[[f"chance/{m}" for m in metrics]].mean()
    return _by_metric(means, "chance/")


def _by_metric(means: pd.DataFrame, prefix: str) -> pd.Series:
    """One column per ``<prefix><metric>`` -> one series with the metric as the last index."""
    long = means.rename(columns=lambda c: c.removeprefix(prefix)).reset_index()
    keys = list(means.index.names)
    long = long.melt(id_vars=keys, var_name="metric")
    return long.set_index([*keys, "metric"])["value"]


def _other_statuses(statuses: pd.Series) -> str:
    return ", ".join(dict.fromkeys(s for s in statuses if s != "completed"))


def _appearance(values: pd.Series) -> list:
    unique = list(dict.fromkeys(values))
    return sorted(unique) if all(isinstance(v, int | np.integer) for v in unique) else unique


def evaluated_lengths(runs: pd.DataFrame, lengths: pd.DataFrame) -> pd.DataFrame:
    """``lengths`` with the run's task and the length's ``split``: ``ID`` inside the task's
    training range, ``OOD`` beyond."""
    out = lengths.merge(runs[["task"]], left_on="run", right_index=True)
    ranges = runs.groupby("task")[["train_min", "train_max"]].min()
    inside = out["length"].between(
        out["task"].map(ranges["train_min"]), out["task"].map(ranges["train_max"])
    )
    return out.assign(split=np.where(inside, "ID", "OOD"))


def task_stats(
    runs: pd.DataFrame, evaluated: pd.DataFrame, rows: list[str], metrics: list[str]
) -> pd.DataFrame:
    """Cells per task, split (``ID``: mean over in-distribution lengths, ``OOD``: beyond) and
    metric, with the chance level of each column (mean over its lengths)."""
    long = runs.melt(
        id_vars=[*rows, "task", "seed", "status", "learned"],
        value_vars=[f"{s}/{m}" for m in metrics for s in SPLITS],
        var_name="column",
    )
    parts = long.pop("column").str.split("/", n=1)
    long = long.assign(split=parts.str[0].map(SPLIT_NAMES), metric=parts.str[1])
    cols = ["task", "split", "metric"]
    stats = cell_stats(long, rows, cols, "value")
    stats = stats.assign(
        chance=_per_column(stats, cols, chance_means(evaluated, ["task", "split"], metrics)),
        id_mean=_per_column(stats, [*rows, "task", "metric"], id_means(runs, rows, metrics)),
    )
    return mark_best(stats, cols)


def length_stats(
    runs: pd.DataFrame, evaluated: pd.DataFrame, rows: list[str], metrics: list[str]
) -> pd.DataFrame:
    """Cells per task, evaluation length and metric, with the length's split and chance level;
    every run of a task counts at every length that task was evaluated at."""
    split = evaluated.groupby(["task", "length"])["split"].first()
    grid = runs[[*rows, "task", "seed", "status", "learned"]].reset_index(names="run")
    grid = grid.merge(split.reset_index()[["task", "length"]])
    values = grid.merge(evaluated[["run", "length", *metrics]], how="left")
    long = values.melt(id_vars=list(grid.columns), value_vars=metrics, var_name="metric")
    cols = ["task", "length", "metric"]
    stats = cell_stats(long, rows, cols, "value")
    stats = stats.assign(
        split=_per_column(stats, ["task", "length"], split),
        chance=_per_column(stats, cols, chance_means(evaluated, ["task", "length"], metrics)),
        id_mean=_per_column(stats, [*rows, "task", "metric"], id_means(runs, rows, metrics)),
    )
    return mark_best(stats, cols)


def _per_column(stats: pd.DataFrame, cols: list[str], values: pd.Series) -> list:
    """``values`` (indexed by column keys) for every cell of ``stats``."""
    return [values.get(key) for key in zip(*(stats[c] for c in cols), strict=True)]


def no_score(cell: pd.Series) -> str | None:
    """Why a cell has no score to show, or None: ``NOT_LEARNED`` (out of distribution, no seed
    learned the task in distribution), its runs' statuses (``failed``, ``missing``, ``running,
    failed``) or ``NOTHING_MEASURED`` (completed, e.g. without an out-of-distribution length)."""
    if cell["n"] > 0:
        unlearned = cell.get("judged", 0) and not cell.get("learned", 0)
        return NOT_LEARNED if unlearned and cell.get("split") == "OOD" else None
    return cell["not_completed"] or NOTHING_MEASURED


def cell_text(cell: pd.Series) -> str:
    """``97.1 [95.0, 99.2] (3/3)``: the mean and its 95% interval in percent (clipped to
    [0, 100]; ``[–]`` for one seed), with ``learned k/n`` when some seeds did not learn the task;
    ``not learned (ID 64.2, 0/3)`` for an out-of-distribution cell whose seeds all failed to
    learn it; without a result the statuses of the runs, e.g. ``failed (0/3)``, ``running
    (0/3)``, ``missing (0/3)``; ``n/a`` when the runs completed but had nothing to measure (e.g.
    no out-of-distribution length)."""
    word = no_score(cell)
    if word == NOT_LEARNED:
        return f"{NOT_LEARNED} (ID {_percent(cell['id_mean'])}, 0/{cell['judged']})"
    if word == NOTHING_MEASURED:
        return word
    if word:
        return f"{word} ({cell['n']}/{cell['runs']})"
    judged, learned = cell.get("judged", 0), cell.get("learned", 0)
    low, high = (min(max(cell[k], 0.0), 1.0) for k in ("ci95_low", "ci95_high"))
    interval = "[–]" if np.isnan(cell["ci95_low"]) else f"[{low * 100:.1f}, {high * 100:.1f}]"
    partly = f", learned {learned}/{judged}" if learned < judged else ""
    return f"{cell['mean'] * 100:.1f} {interval} ({cell['n']}/{cell['runs']}{partly})"


def pivot(
    stats: pd.DataFrame, rows: list[str], cols: list[str]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The cell texts and the ``best`` flags, rows x columns; a last row ``chance`` holds the
    chance level of each column when the runs recorded one."""
    texts = stats.assign(text=stats.apply(cell_text, axis=1))
    table = texts.pivot(index=rows, columns=cols, values="text").fillna(NO_RUNS)
    best = texts.pivot(index=rows, columns=cols, values="best").fillna(False).astype(bool)
    chance = stats.groupby(cols, observed=True)["chance"].first()
    if chance.notna().any():
        label = [("chance", *[""] * (len(rows) - 1))]
        index = (
            pd.MultiIndex.from_tuples(label, names=rows)
            if len(rows) > 1
            else pd.Index(["chance"], name=rows[0])
        )
        row = [chance.reindex(table.columns).map(_percent).tolist()]
        table = pd.concat([table, pd.DataFrame(row, index=index, columns=table.columns)])
        best = pd.concat([best, pd.DataFrame(False, index=index, columns=best.columns)])
    return table, best


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


def to_markdown(stats: pd.DataFrame, rows: list[str], cols: list[str]) -> str:
    table, best = pivot(stats, rows, cols)
    table = table.where(~best, "**" + table + "**")
    table.columns = [column_label(c, stats) for c in table.columns]
    return table.reset_index().to_markdown(index=False, disable_numparse=True)


def to_latex(stats: pd.DataFrame, rows: list[str], cols: list[str], caption: str) -> str:
    table, best = pivot(stats, rows, cols)
    table.columns = pd.MultiIndex.from_tuples([column_header(c, stats) for c in table.columns])
    styler = table.style.format(escape="latex")
    styler = styler.format_index(escape="latex", axis=0).format_index(escape="latex", axis=1)
    styler = styler.apply(lambda _: np.where(best, "textbf:--rwrap;", ""), axis=None)
    return styler.to_latex(
        hrules=True, caption=latex_escape(caption), multicol_align="c", position_float="centering"
    )


def latex_escape(text: str) -> str:
    """Escape LaTeX's special characters in plain text (captions)."""
    special = {"\\": r"\textbackslash{}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
    special |= {c: "\\" + c for c in "&%$#_{}"}
    return "".join(special.get(c, c) for c in text)


def not_completed(runs: pd.DataFrame, rows: list[str]) -> list[str]:
    """One line per run that did not complete: its setting, status, error and where it lies."""
    lines = []
    for _, run in runs[runs["status"] != "completed"].iterrows():
        name = " · ".join(str(run[c]) for c in [*rows, "task"])
        error = str(run["error"]).strip().splitlines()[0] if run["error"] else ""
        where = f" ({run['source']})" if isinstance(run["source"], str) and run["source"] else ""
        lines.append(f"{name} · seed {run['seed']}: {run['status']}: {error[:200]}{where}")
    return lines


@dataclass(frozen=True)
class Table:
    """One table file set (``<stem>.{md,tex,csv}``): its cells, its column keys, its caption."""

    stem: str
    stats: pd.DataFrame
    cols: list[str]
    caption: str


@dataclass
class Ablation:
    """An ablation's tables and what they were built from."""

    runs: pd.DataFrame  # every run of the grid (missing ones added), one row each
    lengths: pd.DataFrame  # collect.lengths_frame of the runs, with task and split
    rows: list[str]  # the row axes: pe, then the other varying settings
    metrics: list[str]  # every metric, the one shown first (make_table --metric) first
    setting: str  # the settings all runs share, the protocol and the seeds per cell
    by_task: pd.DataFrame  # cell_stats per task, split and metric
    by_length: pd.DataFrame  # cell_stats per task, evaluation length and metric
    steps: pd.DataFrame | None = None  # steps_stats: None when no run had a competence budget

    @property
    def metric(self) -> str:
        """The metric shown first."""
        return self.metrics[0]

    @property
    def caption(self) -> str:
        """The caption of the tables with every metric side by side."""
        return self.caption_of(self.metrics)

    def caption_of(self, metrics: list[str]) -> str:
        """``Test token acc (%). Fixed: ... Protocol: ... Seeds per cell: 3.``"""
        names = " and ".join(metric_name(m) for m in metrics)
        side = ", side by side" if len(metrics) > 1 else ""
        return f"Test {names} (%){side}. {self.setting}"

    def side_by_side(self) -> list[Table]:
        """The tables with every metric, side by side in each column: ``table_tasks``,
        ``table_lengths``."""
        return [
            Table("table_tasks", self.by_task, ["task", "split", "metric"], self.caption),
            Table("table_lengths", self.by_length, ["task", "length", "metric"], self.caption),
        ]

    def per_metric(self) -> list[Table]:
        """Each table of one metric alone: ``table_tasks.exact_match``, ..."""
        return [
            Table(
                f"{t.stem}.{m}", t.stats[t.stats["metric"] == m], t.cols[:-1], self.caption_of([m])
            )
            for t in self.side_by_side()
            for m in self.metrics
        ]

    def csv_names(self) -> list[str]:
        """The CSV files that hold every cell (``write_tables``): the side-by-side tables (a
        column ``metric``) and the steps to learn."""
        steps = ["table_steps"] if self.steps is not None else []
        return [*(table.stem for table in self.side_by_side()), *steps]


def ablation(
    runs: pd.DataFrame,
    lengths: pd.DataFrame,
    metric: str = "exact_match",
    protocol: str = "mean",
) -> Ablation:
    """The tables of ``runs`` (``collect.runs_frame``) for every metric, ``metric`` first,
    under ``protocol`` (``PROTOCOLS``); runs of a shipped baseline among them add the row axis
    ``origin`` (``baseline.with_origin``)."""
    if protocol not in PROTOCOLS:
        raise ConfigError(f"unknown protocol {protocol!r}; valid choices: {', '.join(PROTOCOLS)}")
    metrics = metric_order(metric)
    runs = with_origin(runs)
    rows = row_axes(runs)
    full = complete(runs, rows)
    full, rows = select(full, rows, protocol)
    evaluated = evaluated_lengths(full, lengths)
    return Ablation(
        runs=full,
        lengths=evaluated,
        rows=rows,
        metrics=metrics,
        setting=f"{fixed_note(runs)} {PROTOCOLS[protocol]}{seeds_note(full, rows)}",
        by_task=task_stats(full, evaluated, rows, metrics),
        by_length=length_stats(full, evaluated, rows, metrics),
        steps=steps_stats(full, rows),
    )


LR_AXIS = "model.optimizer.lr"  # the setting the tuned protocol selects per encoding and task
PROTOCOLS = {
    "mean": "Protocol: mean over seeds.",
    "tuned": (
        f"Protocol: tuned: per row and task, the {LR_AXIS} whose seeds have the best mean "
        "in-distribution validation score (exact match, then token accuracy), mean over its "
        "seeds; selected on validation, never on test numbers."
    ),
    "max": (
        "Protocol: max (Deletang et al. 2023): per row and task, the one run over seeds (and "
        f"{LR_AXIS}, when the runs vary it) with the best in-distribution validation score "
        "(exact match, then token accuracy); selected on validation, never on test numbers."
    ),
}


def select(runs: pd.DataFrame, rows: list[str], protocol: str) -> tuple[pd.DataFrame, list[str]]:
    """The runs a protocol reports and its row axes: all of them (``mean``); per row (the
    learning rate aside) and task, the runs of the learning rate with the best mean
    validation score (``tuned``, adding the column ``selected``), or the one best run
    (``max``). Groups without a completed run keep all their runs, so failures still show."""
    if protocol == "mean":
        return runs, rows
    if protocol == "tuned" and LR_AXIS not in rows:
        raise ConfigError(
            f"--protocol tuned selects a {LR_AXIS} per encoding and task, but the runs do not "
            f"vary it; sweep it (learning_rates=[1e-3,3e-3] or {LR_AXIS}=1e-3,3e-3)"
        )
    kept_rows = [r for r in rows if r != LR_AXIS]
    chosen = []
    for _, group in runs.groupby([*kept_rows, "task"], sort=False, observed=True):
        done = group[group["status"].eq("completed") & group["val_id"].notna()]
        if done.empty:
            chosen.append(group)
        elif protocol == "max":
            chosen.append(done.loc[[done["val_id"].idxmax()]])
        else:
            best_lr = done.groupby(LR_AXIS, sort=False)["val_id"].mean().idxmax()
            chosen.append(group[group[LR_AXIS].eq(best_lr)])
    selected = pd.concat(chosen).sort_index()
    if LR_AXIS in rows:
        selected = selected.assign(selected=selected[LR_AXIS])
    return selected, kept_rows


def seeds_note(runs: pd.DataFrame, rows: list[str]) -> str:
    """`` Seeds per cell: 3.`` (or a range when cells differ): the seeds in each row and task."""
    counts = runs.groupby([*rows, "task"], observed=True)["seed"].nunique()
    low, high = (int(counts.min()), int(counts.max())) if len(counts) else (0, 0)
    return f" Seeds per cell: {low}." if low == high else f" Seeds per cell: {low}-{high}."


def write_tables(result: Ablation, out_dir: Path) -> list[Path]:
    """Each table (``Ablation.side_by_side``, ``Ablation.per_metric``) as ``.md`` (with its
    caption, why a column has no bold, the legend and every run that did not complete),
    ``.tex`` and ``.csv`` (the cell statistics, one row per cell) in ``out_dir``."""
    problems = not_completed(result.runs, result.rows)
    notes = [LEGEND, ""]
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
        latex = to_latex(table.stats, result.rows, table.cols, table.caption)
        written.append(_write(out_dir / f"{table.stem}.tex", latex))
        table.stats.drop(columns="values").to_csv(out_dir / f"{table.stem}.csv", index=False)
        written.append(out_dir / f"{table.stem}.csv")
    if result.steps is not None:
        table = steps_markdown(result.steps, result.rows)
        written.append(_write(out_dir / "table_steps.md", f"{table}\n\n{STEPS_LEGEND}\n"))
        result.steps.to_csv(out_dir / "table_steps.csv", index=False)
        written.append(out_dir / "table_steps.csv")
    return written


LEGEND = (
    "Metrics: exact match, the whole answer right; token acc, the share of answer tokens right "
    "(both greedy). Cells: mean over seeds in percent, with its 95% confidence interval "
    "(Student's t-interval over the seeds, clipped to [0, 100]; [–]: one seed) (k/n: seeds with "
    "a result / seeds in the grid; learned k/n: seeds that learned the task in distribution, "
    "under a competence budget). **Bold**: the best mean of the column and every cell not "
    "significantly different from it (Welch's t-test, two-sided, α = 0.05, Holm's correction "
    "over the column; a cell or a best with one seed cannot be told apart and stays bold); in "
    "an OOD column only cells whose seeds all learned the task compete; a column whose "
    "competing cells all show one value (e.g. 0.0) has no bold. ID: mean over the evaluation "
    "lengths inside the training range; OOD: over the longer ones; not learned: no seed "
    "learned the task, so its OOD score measures nothing (its ID mean is shown); not run: no "
    "run of this setting. The CSV files hold every number (metric, mean, std, ci95_low, "
    "ci95_high, n, learned, p_vs_top)."
)
STEPS_LEGEND = (
    "Steps to learn (competence budget, `learned_at`): the training step at which in-distribution "
    "validation first met the criterion for good, mean ± standard deviation over the seeds that "
    "learned (k/n: seeds that learned / seeds with a criterion); not learned: none did within "
    "trainer.max_steps."
)


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


def steps_text(cell: pd.Series) -> str:
    """``1250 ± 180 (3/3)``; ``not learned (0/3)``."""
    if not cell["learned"]:
        return f"not learned (0/{cell['judged']})"
    std = "–" if np.isnan(cell["std"]) else f"{cell['std']:.0f}"
    return f"{cell['mean']:.0f} ± {std} ({cell['learned']}/{cell['judged']})"


def steps_markdown(steps: pd.DataFrame, rows: list[str]) -> str:
    """The steps-to-learn table, rows x tasks."""
    texts = steps.assign(text=steps.apply(steps_text, axis=1))
    table = texts.pivot(index=rows, columns="task", values="text")
    return table.reset_index().to_markdown(index=False, disable_numparse=True)


def fixed_note(runs: pd.DataFrame) -> str:
    """``Fixed: model=decoder, ...``: the settings every run shares."""
    fixed = ", ".join(f"{k}={v}" for k, v in fixed_settings(runs).items())
    return f"Fixed: {fixed or 'nothing'}."


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
