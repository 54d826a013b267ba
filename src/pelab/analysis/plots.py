"""Figures of an ablation, one file set per metric, each saved as PNG and PDF:

- ``length_curves``: the score against evaluation length, one panel per task, one line per row
  of the table, every point at its measured length (never moved sideways); each row its own
  colour, marker and line style (``series_style``: distinct for up to 40 rows), markers
  shrinking row by row (rows on one point: concentric), one legend entry each, labelled by
  ``row_labels`` (``--label`` renames every row, the baseline's too); under ``--baseline`` a
  baseline's row of the user's encoding, the user's control, dashed in that row's colour, and
  the baseline's other rows, where the figure shows up to ``FEW_ROWS`` rows in all, in colours
  of their own, each named; more (a zoo of 25) thin and grey beneath the user's, one legend
  entry per baseline;
- ``heatmap``: rows x evaluation lengths, one panel per task, each cell coloured by where its
  score lies between 0, the chance level (white) and 100%, annotated; a cell without a score is
  grey and named as in the tables (``not learned``, ``not run``, ``failed``, ...), the legend
  saying what grey means.
"""

from __future__ import annotations

from itertools import product
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from pelab.analysis.baseline import ORIGIN, YOURS  # noqa: E402
from pelab.analysis.cells import NO_RUNS, NO_SCORE_MEANINGS, metric_name, no_score  # noqa: E402
from pelab.analysis.plot_styles import (  # noqa: E402
    BASELINE_STYLE,
    NO_SCORE_GREY,
    Style,
    above_chance,
    baseline_of,
    row_labels,
    row_settings,
    row_styles,
)
from pelab.errors import ConfigError  # noqa: E402

PUBLISHED_COLUMNS = ("pe", "task", "length", "value", "source")


def read_published(path: Path) -> pd.DataFrame:
    """Published numbers to overlay (``make_table.py --published <csv>``): one row per point,
    columns ``PUBLISHED_COLUMNS`` (``value`` in [0, 1], of the table's metric; ``source`` e.g.
    ``Ruoss et al. 2023, Table 4``); a ``ConfigError`` naming missing columns."""
    if not Path(path).is_file():
        raise ConfigError(f"--published {path}: no such file")
    frame = pd.read_csv(path)
    missing = [c for c in PUBLISHED_COLUMNS if c not in frame.columns]
    if missing:
        raise ConfigError(
            f"{path}: no column {', '.join(missing)}; a published-numbers file has the columns "
            f"{', '.join(PUBLISHED_COLUMNS)}"
        )
    return frame


def length_curves(
    runs: pd.DataFrame,
    lengths: pd.DataFrame,
    rows: list[str],
    metric: str,
    published: pd.DataFrame | None = None,
    renames: dict[str, str] | None = None,
) -> Figure:
    """One panel per task: the mean ``metric`` over completed seeds at each evaluation length it
    was measured at (error bars: standard deviation), one line per row of the table
    (``row_styles``; a baseline's rows among many thin and grey, without error bars, beneath),
    the chance level dotted; the lengths seen in training are shaded. The legend has one entry
    per row drawn in any panel (the grey rows: one per baseline). ``published``
    (``read_published``) numbers are drawn as hollow squares in their encoding's colour, one
    legend entry per source. Labels: ``row_labels`` (``renames``: ``--label``). Sized for a
    paper: 2.6 in per task."""
    data = lengths.drop(columns="task", errors="ignore").merge(
        runs[[*rows, "task", "status", "train_min", "train_max"]], left_on="run", right_index=True
    )
    data = data[data["status"] == "completed"]
    tasks = list(dict.fromkeys(data["task"]))
    fig, axes = plt.subplots(
        1, max(len(tasks), 1), figsize=(2.6 * max(len(tasks), 1) + 0.6, 2.8), squeeze=False
    )
    styles = row_styles(runs, rows)
    names = row_labels(list(styles), rows, renames)
    drawn: set[object] = set()  # the rows drawn in any panel
    others: dict[str, object] = {}  # legend entries of the published numbers and chance
    for ax, task in zip(axes[0], tasks, strict=False):
        part = data[data["task"] == task]
        ax.axvspan(part["train_min"].min(), part["train_max"].max(), color="0.92", zorder=0)
        for key, group in part.groupby(rows if len(rows) > 1 else rows[0], sort=False):
            curve = group.groupby("length")[metric].agg(["mean", "std"])
            _draw_row(ax, curve, styles[key], _legend_name(key, rows, styles, names))
            drawn.add(key)
        if published is not None:
            _overlay(ax, published[published["task"] == task], rows, styles)
        chance = part.groupby("length")[f"chance/{metric}"].mean().dropna()
        if len(chance):
            ax.plot(chance.index, chance * 100, ":", color="black", lw=1, label="chance level")
        for handle, name in zip(*ax.get_legend_handles_labels(), strict=True):
            if name == "chance level" or name.startswith("published: "):
                others[name] = handle
        ticks = sorted(part["length"].unique())
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, labels=ticks)
        ax.set_xlim(ticks[0] / 1.3, ticks[-1] * 1.3)
        ax.set_ylim(-3, 103)
        ax.set_title(task)
    fig.supxlabel("evaluation length (shaded: training lengths)", fontsize="medium")
    axes[0][0].set_ylabel(f"{metric_name(metric)} (%)")
    _figure_legend(fig, _row_entries(drawn, rows, styles, names) | others)
    fig.tight_layout()
    return fig


def _legend_name(
    key: object, rows: list[str], styles: dict[object, Style], names: dict[object, str]
) -> str:
    """A row's legend entry: its label (``row_labels``), but the grey rows of a baseline share
    one, ``ablation_cpu: 24 rows (grey)``."""
    name = baseline_of(key, rows)
    if name is None or styles[key] != BASELINE_STYLE:
        return names[key]
    count = sum(baseline_of(k, rows) == name and v == BASELINE_STYLE for k, v in styles.items())
    return f"{name}: {count} row{'s' if count > 1 else ''} (grey)"


def _row_entries(
    drawn: set[object], rows: list[str], styles: dict[object, Style], names: dict[object, str]
) -> dict[str, Line2D]:
    """One legend entry per row drawn, in the rows' order, the user's rows first, then one per
    baseline: a line in the row's style."""
    keys = sorted(
        (k for k in styles if k in drawn), key=lambda k: baseline_of(k, rows) is not None
    )
    return {_legend_name(k, rows, styles, names): Line2D([], [], **_kw(styles[k])) for k in keys}


def _draw_row(ax, curve: pd.DataFrame, style: Style, name: str) -> None:
    """One row's line at its measured lengths: a ``thin`` style's (a baseline's among many)
    thin beneath, every other row's in its style with error bars above."""
    if style.thin:
        ax.plot(curve.index, curve["mean"] * 100, lw=0.8, zorder=2, label=name, **_kw(style))
        return
    ax.errorbar(
        curve.index,
        curve["mean"] * 100,
        yerr=curve["std"].fillna(0) * 100,
        capsize=2,
        zorder=3 + (8.0 - style.size) / 10,  # the smaller markers above the larger
        label=name,
        **_kw(style),
    )


def _kw(style: Style) -> dict[str, object]:
    return {
        "color": style.color,
        "marker": style.marker,
        "linestyle": style.linestyle,
        "markersize": style.size,
    }


def _figure_legend(fig: Figure, legend: dict[str, object]) -> None:
    """``legend``: the rows, then each published source (drawn as a black square), then the
    chance level; in columns of at most 20 entries, right of the panels."""
    for name in [n for n in legend if n.startswith("published: ")]:
        del legend[name]
        legend[name] = Line2D([], [], ls="none", marker="s", mfc="none", color="black")
    chance = legend.pop("chance level", None)
    if chance is not None:
        legend["chance level"] = chance
    fig.legend(
        list(legend.values()),
        list(legend),
        loc="center left",
        bbox_to_anchor=(1.0, 0.5),
        fontsize="small",
        ncols=max(1, -(-len(legend) // 20)),
    )


def _overlay(ax, points: pd.DataFrame, rows: list[str], styles: dict[object, Style]) -> None:
    """Published points of one task, in the colour of their encoding's first row."""
    first: dict[object, object] = {}
    for key, style in styles.items():
        first.setdefault(row_settings(key, rows)["pe"], style.color)
    for (pe, source), group in points.groupby(["pe", "source"], sort=False):
        ax.plot(
            group["length"],
            group["value"] * 100,
            linestyle="none",
            marker="s",
            markersize=7,
            markerfacecolor="none",
            color=first.get(pe, "0.2"),
            label=f"published: {source}",
        )


def heatmap(
    stats: pd.DataFrame, rows: list[str], metric: str, renames: dict[str, str] | None = None
) -> Figure:
    """One panel per task of ``stats`` (``Ablation.by_length``), rows x evaluation lengths, for
    ``metric``: the mean over seeds in percent, coloured by ``above_chance`` (red below the
    column's chance level, white at it, blue above); a cell without a score (``cells.no_score``,
    or ``NO_RUNS``) is grey and shows the tables' word, and the legend says what each means."""
    cells = stats[stats["metric"] == metric]
    tasks = list(dict.fromkeys(cells["task"]))
    if not tasks:  # e.g. runs that failed before recording their evaluation lengths
        fig = plt.figure(figsize=(4, 1))
        fig.text(0.5, 0.5, f"no {metric_name(metric)} at any evaluation length", ha="center")
        return fig
    keys = list(cells[rows].drop_duplicates().itertuples(index=False, name=None))
    widths = [cells.loc[cells["task"] == task, "length"].nunique() for task in tasks]
    fig, axes = plt.subplots(
        1,
        len(tasks),
        figsize=(0.55 * sum(widths) + 0.4 * len(tasks) + 3.5, 0.3 * len(keys) + 2.2),
        squeeze=False,
        sharey=True,
        gridspec_kw={"width_ratios": widths},
    )
    words: set[str] = set()
    for ax, task in zip(axes[0], tasks, strict=True):
        image, shown = _task_panel(ax, cells[cells["task"] == task], rows, keys)
        ax.set_title(task)
        words |= shown
    names = row_labels(keys, rows, renames)
    axes[0][0].set_yticks(range(len(keys)), labels=[names[k] for k in keys])
    for tick, key in zip(axes[0][0].get_yticklabels(), keys, strict=True):
        if row_settings(key, rows).get(ORIGIN) == YOURS:
            tick.set_fontweight("bold")
    bar = fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8, ticks=[-1, 0, 1])
    bar.ax.set_yticklabels(["0", "chance", "100"])
    bar.set_label(f"{metric_name(metric)} (%)")
    if words:
        fig.legend(
            handles=[
                Patch(
                    facecolor=NO_SCORE_GREY, label=f"{w}: {NO_SCORE_MEANINGS.get(w, 'no result')}"
                )
                for w in sorted(words)
            ],
            title="grey: no score",
            loc="upper center",
            bbox_to_anchor=(0.45, 0.0),
            fontsize="small",
        )
    return fig


def _task_panel(ax, cells: pd.DataFrame, rows: list[str], keys: list[tuple]):
    """One task's cells, rows ``keys`` x its lengths; returns the image and the words of its
    grey cells."""
    lengths = sorted(int(n) for n in cells["length"].unique())
    at = {(tuple(c[r] for r in rows), int(c["length"])): c for _, c in cells.iterrows()}
    colour = np.full((len(keys), len(lengths)), np.nan)
    words: set[str] = set()
    for (i, key), (j, length) in product(enumerate(keys), enumerate(lengths)):
        cell = at.get((key, length))
        word = NO_RUNS if cell is None else no_score(cell)
        if word is None:
            colour[i, j] = above_chance(cell["mean"], cell["chance"])
            text, ink = (
                f"{cell['mean'] * 100:.0f}",
                "white" if abs(colour[i, j]) > 0.6 else "black",
            )
        else:
            words.add(word)
            text, ink = word.replace(" ", "\n"), "0.3"
        ax.text(j, i, text, ha="center", va="center", fontsize=6.5, color=ink)
    image = ax.imshow(np.ma.masked_invalid(colour), cmap="RdBu", vmin=-1, vmax=1, aspect="auto")
    ax.set_facecolor(NO_SCORE_GREY)
    ax.set_xticks(range(len(lengths)), labels=lengths)
    ax.set_xlabel("evaluation length")
    return image, words


def save(fig: Figure, stem: Path) -> list[Path]:
    """``<stem>.png`` (150 dpi) and ``<stem>.pdf``, cut as ``bbox_inches="tight"`` cuts but
    measured once, at the PNG's resolution, for both (a layout less per file); closes it."""
    dpi = 150
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.parent / f"{stem.name}.png", stem.parent / f"{stem.name}.pdf"]
    fig.set_dpi(dpi)
    fig.draw_without_rendering()
    drawn = fig.get_tightbbox(fig.canvas.get_renderer())
    for path in paths:
        fig.savefig(path, dpi=dpi, bbox_inches=drawn.padded(plt.rcParams["savefig.pad_inches"]))
    plt.close(fig)
    return paths
