"""Ablation tables: one row per encoding (and per any other setting the runs vary), one column
per task, split (in- / out-of-distribution mean) and metric, or per task, evaluation length and
metric. Every metric is tabulated: side by side (``table_tasks``), and each alone
(``table_tasks.token_acc``), so no metric's table replaces another's.

A cell aggregates the seeds of its setting (``statistics``; as text: ``cells``) over the seeds in
the cell's grid: the runs found and the jobs their sweep planned (``collect``), so a failed,
crashed or missing run is counted in its cell and listed under the table, never dropped; no run
is invented where no sweep planned one (a cell without runs reads ``not run``).

Runs under a competence budget (``learned_at``, ``pelab.competence``) say whether they learned
their task in distribution: only cells whose seeds all learned take part in the ranking (bold)
of an out-of-distribution column. A protocol (``PROTOCOLS``: ``mean``, ``tuned``, ``max``)
chooses the runs a table reports. ``render`` writes the tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from pelab.analysis.baseline import with_origin
from pelab.analysis.cells import metric_name
from pelab.analysis.frames import NOT_SET, RUN_FIELDS, SPLITS
from pelab.analysis.protocols import PROTOCOLS, select
from pelab.analysis.statistics import cell_stats, mark_best, steps_stats
from pelab.errors import ConfigError
from pelab.metrics import METRICS

SPLIT_NAMES = {"id": "ID", "ood": "OOD"}


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
    never ran are already there as ``missing`` runs (``sweep_grid``), and a cell no run belongs
    to (runs browsed from unrelated sources) stays empty (``cells.NO_RUNS``). The index stays
    the run id that ``frames.lengths_frame`` refers to."""
    keys = [*rows, "task", "seed"]
    ranked = runs.assign(_done=runs["status"].eq("completed")).sort_values(
        ["_done", "source"], kind="stable"
    )
    return ranked[~ranked.duplicated(keys, keep="last")].drop(columns="_done").sort_index()


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


@dataclass(frozen=True)
class Table:
    """One table file set (``<stem>.{md,tex,csv}``): its cells, its column keys, its caption."""

    stem: str
    stats: pd.DataFrame
    cols: list[str]
    caption: str
    paper_caption: str  # the caption in a paper's words: no setting the runs share (.tex)


@dataclass
class Ablation:
    """An ablation's tables and what they were built from."""

    runs: pd.DataFrame  # every run of the grid (missing ones added), one row each
    lengths: pd.DataFrame  # frames.lengths_frame of the runs, with task and split
    rows: list[str]  # the row axes: pe, then the other varying settings
    metrics: list[str]  # every metric, the one shown first (make_table --metric) first
    fixed: str  # the settings all runs share (``fixed_note``)
    design: str  # the protocol and the seeds per cell
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

    def caption_of(self, metrics: list[str], fixed: bool = True) -> str:
        """``Test token acc (%). Fixed: ... Protocol: ... Seeds per cell: 3.`` (without
        ``Fixed: ...`` unless ``fixed``: a paper's caption)."""
        names = " and ".join(metric_name(m) for m in metrics)
        side = ", side by side" if len(metrics) > 1 else ""
        setting = f"{self.fixed} {self.design}" if fixed else self.design
        return f"Test {names} (%){side}. {setting}"

    def side_by_side(self) -> list[Table]:
        """The tables with every metric, side by side in each column: ``table_tasks``,
        ``table_lengths``."""
        paper = self.caption_of(self.metrics, fixed=False)
        return [
            Table("table_tasks", self.by_task, ["task", "split", "metric"], self.caption, paper),
            Table(
                "table_lengths", self.by_length, ["task", "length", "metric"], self.caption, paper
            ),
        ]

    def per_metric(self) -> list[Table]:
        """Each table of one metric alone: ``table_tasks.exact_match``, ..."""
        return [
            Table(
                f"{t.stem}.{m}",
                t.stats[t.stats["metric"] == m],
                t.cols[:-1],
                self.caption_of([m]),
                self.caption_of([m], fixed=False),
            )
            for t in self.side_by_side()
            for m in self.metrics
        ]

    def csv_names(self) -> list[str]:
        """The CSV files that hold every cell (``render.write_tables``): the side-by-side tables (a
        column ``metric``) and the steps to learn."""
        steps = ["table_steps"] if self.steps is not None else []
        return [*(table.stem for table in self.side_by_side()), *steps]


def ablation(
    runs: pd.DataFrame,
    lengths: pd.DataFrame,
    metric: str = "exact_match",
    protocol: str = "mean",
) -> Ablation:
    """The tables of ``runs`` (``frames.runs_frame``) for every metric, ``metric`` first,
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
        fixed=fixed_note(runs),
        design=f"{PROTOCOLS[protocol]}{seeds_note(full, rows)}",
        by_task=task_stats(full, evaluated, rows, metrics),
        by_length=length_stats(full, evaluated, rows, metrics),
        steps=steps_stats(full, rows),
    )


def seeds_note(runs: pd.DataFrame, rows: list[str]) -> str:
    """`` Seeds per cell: 3.`` (or a range when cells differ): the seeds in each row and task."""
    counts = runs.groupby([*rows, "task"], observed=True)["seed"].nunique()
    low, high = (int(counts.min()), int(counts.max())) if len(counts) else (0, 0)
    return f" Seeds per cell: {low}." if low == high else f" Seeds per cell: {low}-{high}."


def fixed_note(runs: pd.DataFrame) -> str:
    """``Fixed: model=decoder, ...``: the settings every run shares."""
    fixed = ", ".join(f"{k}={v}" for k, v in fixed_settings(runs).items())
    return f"Fixed: {fixed or 'nothing'}."
