"""Figures of an ablation: accuracy against evaluation length (one line per encoding, the
training range shaded) and a heatmap of encodings x tasks; each saved as PNG and PDF."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from pelab.analysis.collect import NOT_SET  # noqa: E402
from pelab.errors import ConfigError  # noqa: E402

_PALETTE = plt.get_cmap("tab20").colors
COLORS = _PALETTE[::2] + _PALETTE[1::2]  # the 10 strong colours first, then their light twins


def label(key: object, rows: list[str]) -> str:
    """A row of the table in words: the encoding, then each other setting by name
    (``rope · model.optimizer.lr=0.001``; ``=default``: the run did not set it)."""
    values = key if isinstance(key, tuple) else (key,)
    words = [
        str(value) if row == "pe" else f"{row}={'default' if value == NOT_SET else value}"
        for row, value in zip(rows, values, strict=True)
    ]
    return " · ".join(words)


def row_colors(runs: pd.DataFrame, rows: list[str]) -> dict[object, tuple[float, ...]]:
    """One colour per row of the table, the same in every panel and figure of a sweep: rows in
    their order of appearance in ``runs`` (whatever became of their runs), colours in turn."""
    keys = runs[rows].drop_duplicates().itertuples(index=False, name=None)
    return {
        key if len(rows) > 1 else key[0]: COLORS[i % len(COLORS)] for i, key in enumerate(keys)
    }


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


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")  # one per row of a panel


def length_curves(
    runs: pd.DataFrame,
    lengths: pd.DataFrame,
    rows: list[str],
    metric: str,
    published: pd.DataFrame | None = None,
) -> Figure:
    """One panel per task: the mean ``metric`` over completed seeds at each evaluation length
    (error bars: standard deviation), one line per row of the table (each with its own marker and
    a small horizontal offset, so equal curves stay visible), the chance level dotted;
    the lengths seen in training are shaded. A row keeps its colour in every panel
    (``row_colors``), and the legend lists every row drawn in any panel. ``published``
    (``read_published``) numbers are drawn as hollow squares in their encoding's colour, one
    legend entry per source."""
    data = lengths.drop(columns="task", errors="ignore").merge(
        runs[[*rows, "task", "status", "train_min", "train_max"]], left_on="run", right_index=True
    )
    data = data[data["status"] == "completed"]
    tasks = list(dict.fromkeys(data["task"]))
    fig, axes = plt.subplots(
        1, max(len(tasks), 1), figsize=(4.2 * max(len(tasks), 1) + 2.5, 3.8), squeeze=False
    )
    colors = row_colors(runs, rows)
    legend: dict[str, object] = {}
    for ax, task in zip(axes[0], tasks, strict=False):
        part = data[data["task"] == task]
        ax.axvspan(part["train_min"].min(), part["train_max"].max(), color="0.9", zorder=0)
        groups = list(part.groupby(rows if len(rows) > 1 else rows[0], sort=False))
        span = float(part["length"].max() - part["length"].min()) or 1.0
        for i, (key, group) in enumerate(groups):
            curve = group.groupby("length")[metric].agg(["mean", "std"])
            # rows with equal values would hide each other: a marker each, and a small offset
            dodge = (i - (len(groups) - 1) / 2) * 0.012 * span
            ax.errorbar(
                curve.index + dodge,
                curve["mean"] * 100,
                yerr=curve["std"].fillna(0) * 100,
                marker=MARKERS[i % len(MARKERS)],
                markersize=4,
                capsize=2,
                color=colors[key],
                label=label(key, rows),
            )
        if published is not None:
            _overlay(ax, published[published["task"] == task], runs, rows, colors)
        chance = part.groupby("length")[f"chance/{metric}"].mean().dropna()
        if len(chance):
            ax.plot(chance.index, chance * 100, ":", color="0.4", label="chance level")
        handles, labels = ax.get_legend_handles_labels()
        legend |= {name: handle for name, handle in zip(labels, handles, strict=True)}
        ticks = sorted(part["length"].unique())
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, labels=ticks)
        ax.set_xlim(ticks[0] / 1.3, ticks[-1] * 1.3)
        ax.set_ylim(-3, 103)
        ax.set_title(task)
        ax.set_xlabel("evaluation length (shaded: training lengths)")
    axes[0][0].set_ylabel(f"{metric.replace('_', ' ')} (%)")
    for name in [n for n in legend if n.startswith("published: ")]:  # a black square each
        del legend[name]
        legend[name] = Line2D([], [], ls="none", marker="s", mfc="none", color="black")
    chance = legend.pop("chance level", None)
    if chance is not None:  # last, after the rows
        legend["chance level"] = chance
    fig.legend(
        list(legend.values()),
        list(legend),
        loc="center left",
        bbox_to_anchor=(1.0, 0.5),
        fontsize="small",
    )
    fig.tight_layout()
    return fig


def _overlay(ax, points: pd.DataFrame, runs, rows: list[str], colors: dict) -> None:
    """Published points of one task, in the colour of their encoding's first row."""
    first = {}
    for key in colors:
        first.setdefault(key[0] if len(rows) > 1 else key, colors[key])
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


def heatmap(stats: pd.DataFrame, rows: list[str], metric: str) -> Figure:
    """Rows x tasks, one panel per split (ID, OOD): the mean over seeds, annotated; a cell
    without any result is grey and names its runs' statuses (``failed``, ``missing``, ...)."""
    splits = list(dict.fromkeys(stats["split"]))
    n_rows, n_tasks = len(stats[rows].drop_duplicates()), stats["task"].nunique()
    fig, axes = plt.subplots(
        1,
        len(splits),
        figsize=(1.1 * n_tasks * len(splits) + 3.5, 0.35 * n_rows + 1.8),
        squeeze=False,
        sharey=True,
    )
    for ax, split in zip(axes[0], splits, strict=True):
        part = stats[stats["split"] == split]
        mean = part.pivot(index=rows, columns="task", values="mean") * 100
        image = ax.imshow(
            np.ma.masked_invalid(mean.to_numpy(dtype=float)),
            vmin=0,
            vmax=100,
            cmap="viridis",
            aspect="auto",
        )
        ax.set_facecolor("0.85")
        words = part.assign(word=part.apply(_cell_word, axis=1))
        words = words.pivot(index=rows, columns="task", values="word")
        for (i, j), value in np.ndenumerate(mean.to_numpy(dtype=float)):
            dark = not np.isnan(value) and value < 60  # dark cell colour: white text
            ax.text(
                j,
                i,
                words.iloc[i, j],
                ha="center",
                va="center",
                fontsize=7,
                color="white" if dark else "black",
            )
        ax.set_xticks(range(mean.shape[1]), labels=list(mean.columns), rotation=30, ha="right")
        ax.set_yticks(range(mean.shape[0]), labels=[label(k, rows) for k in mean.index])
        ax.set_title(f"{split}: {metric.replace('_', ' ')} (%)")
        ax.label_outer()
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8)
    return fig


def _cell_word(cell: pd.Series) -> str:
    if cell["n"] > 0:
        return f"{cell['mean'] * 100:.0f}"
    return cell["not_completed"] or "n/a"


def save(fig: Figure, stem: Path) -> list[Path]:
    """``stem.png`` and ``stem.pdf``; closes the figure."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".png"), stem.with_suffix(".pdf")]
    for path in paths:
        fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)
    return paths
