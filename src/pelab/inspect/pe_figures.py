"""Figures of what an encoding adds, drawn from plain tensors (``pelab.inspect.inspect_pe``
measures them): position tables, cosine similarity against distance, per-head curves over the
relative distance, the linear map between shifted sinusoids and heatmaps over 2-D offsets."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
from torch import Tensor  # noqa: E402

# per attention hook: the figure's title and the y axis of its curves
HOOK_TITLES = {
    "logit_bias": ("logit bias (first layer)", "bias added to the logit"),
    "transform_qk": ("score of a fixed random q, k pair", "q . k / sqrt(d) after transform_qk"),
    "modify_logits": ("change of the logits (q = k fixed, first layer)", "modified - plain logit"),
    "input_bias": (
        "bias from the layer input (seeded random input, q, k; first layer)",
        "bias added",
    ),
    "normalize": ("weights of equal logits (first layer)", "attention weight"),
    "modify_probs": ("change of uniform probabilities (first layer)", "modified / uniform"),
}


def titled(title: str, note: str) -> str:
    """``title``, with ``note`` (what to know before reading the figure) on a line of its own."""
    return f"{title}\n{note}" if note else title


def plot_tables(panels: list[tuple[Tensor, str]], path: Path, columns: int = 1) -> None:
    """A positions x dims heatmap per ``(table [n, d], title)``, ``columns`` to a row, with
    colours centred on 0."""
    rows = len(panels) // columns
    size = (5 + 5 * columns, 4 * rows)
    fig, axes = plt.subplots(rows, columns, figsize=size, squeeze=False, layout="constrained")
    for ax, (table, title) in zip(axes.flat, panels, strict=True):
        limit = table.abs().max().item() or 1.0
        image = ax.imshow(
            table, aspect="auto", cmap="RdBu", vmin=-limit, vmax=limit, interpolation="nearest"
        )
        ax.set(xlabel="dimension", ylabel="position", title=title)
        fig.colorbar(image, ax=ax)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def plot_cosine(table: Tensor, path: Path) -> None:
    """``cos(PE_i, PE_j)`` of the rows of ``table: [n, d]`` as a matrix, and against the
    distance ``|i - j|`` (mean over pairs, and from position 0)."""
    unit = torch.nn.functional.normalize(table, dim=-1)
    similarity = unit @ unit.T  # [n, n]
    n = len(table)
    distance = torch.arange(n)
    mean = [similarity.diagonal(k).mean().item() for k in range(n)]  # over pairs j - i = k
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    image = left.imshow(similarity, cmap="viridis", vmin=-1, vmax=1)
    left.set(xlabel="position j", ylabel="position i", title="cos(PE_i, PE_j)")
    fig.colorbar(image, ax=left)
    right.plot(distance, mean, marker=".", label="mean over pairs")
    right.plot(distance, similarity[0].tolist(), alpha=0.6, label="from position 0")
    right.set(
        xlabel="distance |i - j|", ylabel="cosine similarity", title="similarity vs distance"
    )
    right.axhline(0, color="grey", lw=0.5)
    right.legend()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def plot_relative(
    distance: Tensor, response: Tensor, hook: str, path: Path, note: str = ""
) -> None:
    """One curve per head of ``response: [h, n]`` over ``distance: [n]`` (query minus key);
    ``note``: a second line for the title."""
    title, ylabel = HOOK_TITLES[hook]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for head, curve in enumerate(response):
        ax.plot(distance, curve, marker=".", ms=3, label=f"head {head}")
    ax.set(xlabel="distance i - j (query minus key)", ylabel=ylabel, title=titled(title, note))
    ax.axvline(0, color="grey", lw=0.5)
    ax.legend(fontsize="small", ncol=2)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def plot_linear_map(table: Tensor, path: Path, show_k: int = 4) -> None:
    """Fit ``PE[p + k] ~ PE[p] M_k`` over the rows ``p`` of ``table: [P, d]``, for shifts
    ``k = 1..64``; ``P`` well above ``d`` makes a small residual a property of the encoding and
    not of an underdetermined fit (for sinusoids ~0: a shift rotates each sin/cos pair, Vaswani
    et al. 2017, section 3.5). Draws the residuals and ``M_show_k``."""
    table = table.double()
    shifts = list(range(1, 65))
    residuals, maps = [], {}
    for k in shifts:
        source, target = table[:-k], table[k:]
        m = torch.linalg.lstsq(source, target).solution  # [d, d]
        residuals.append(((source @ m - target).norm() / target.norm()).item())
        maps[k] = m
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    left.semilogy(shifts, residuals, marker=".")
    left.set(
        xlabel="shift k",
        ylabel="||PE[p+k] - PE[p] M_k|| / ||PE[p+k]||",
        title="linear map between shifted positions",
    )
    # the fastest pairs only: the slowest barely turn over P positions, so the fit cannot pin
    # down their block of M_k (the residual stays ~0 whatever it picks there)
    block = maps[show_k][:32, :32]
    image = right.imshow(block, cmap="RdBu", vmin=-1, vmax=1)
    right.set(title=f"M_{show_k}, first 32 dims: 2x2 rotations", xlabel="dim", ylabel="dim")
    fig.colorbar(image, ax=right)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def plot_heatmaps(maps: Tensor, radius: int, title: str, path: Path, note: str = "") -> None:
    """One panel per map of ``maps: [panels, 2R+1, 2R+1]`` over ``(Δrow, Δcol)``; ``note``: a
    second line for the title."""
    fig, axes = plt.subplots(1, len(maps), figsize=(4 * len(maps), 3.8), squeeze=False)
    extent = (-radius - 0.5, radius + 0.5, radius + 0.5, -radius - 0.5)
    for panel, (ax, values) in enumerate(zip(axes[0], maps, strict=True)):
        image = ax.imshow(values, cmap="RdBu", extent=extent, interpolation="nearest")
        label = f"head {panel}" if len(maps) > 1 else ""
        ax.set(xlabel="Δcol", ylabel="Δrow", title=label)
        fig.colorbar(image, ax=ax, fraction=0.046)
    fig.suptitle(titled(title, note))
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


# attention maps are sized for a column of a two-column paper, printed unscaled
COLUMN_WIDTH = 3.3  # in
ATTENTION_COLUMNS = 4  # heads side by side
TEXT_PT, TITLE_PT = 7, 8  # every text of the figure at least TEXT_PT
ATTENTION_DPI = 300
PROMPT_NOTE = "left of the white line: the prompt's keys"
TRAINED_NOTE = "red dashes: the longest training sequence, {} tokens"


def plot_attention(probs: Tensor, tokens: int, title: str, path: Path, trained: int = 0) -> None:
    """The attention probabilities of one attention module on one sample (``probs: [h, i,
    j]``), one panel per head, ``ATTENTION_COLUMNS`` to a row; queries down, keys across, integer
    position ticks. Sized to print unscaled at a column width (``COLUMN_WIDTH``; no text under
    ``TEXT_PT``). The first ``tokens`` keys are the prompt (with BOS and SEP where the model kind
    feeds them), marked by a white line. ``trained``: the longest training sequence (tokens);
    positions from there on were never seen in training, marked by dashed red lines on both
    axes where the panel reaches them. The title (wrapped to the width) says what each line
    marks only where it is drawn. One colour bar (probability, 0 to 1) for every panel."""
    heads, queries, keys = probs.shape
    columns = min(heads, ATTENTION_COLUMNS)
    rows = -(-heads // columns)
    panel = (COLUMN_WIDTH - 0.9) / columns  # less the query axis and the colour bar
    prompt = 0 < tokens < keys
    marked = 0 < trained < max(queries, keys)
    notes = [PROMPT_NOTE] * prompt + [TRAINED_NOTE.format(trained)] * marked
    lines = [part for line in [title, *notes] for part in textwrap.wrap(line, 56)]
    height = rows * (panel * queries / keys + 0.2) + 0.3 + 0.13 * len(lines)
    with plt.rc_context({"font.size": TEXT_PT}):
        fig, axes = plt.subplots(
            rows,
            columns,
            figsize=(COLUMN_WIDTH, height),
            squeeze=False,
            sharex=True,
            sharey=True,
            layout="constrained",
        )
        for head, ax in enumerate(axes.flat):
            if head >= heads:
                ax.axis("off")
                continue
            image = ax.imshow(probs[head], cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
            if prompt:
                ax.axvline(tokens - 0.5, color="white", lw=0.6)
            if 0 < trained < keys:
                ax.axvline(trained - 0.5, color="red", lw=0.8, ls="--")
            if 0 < trained < queries:
                ax.axhline(trained - 0.5, color="red", lw=0.8, ls="--")
            ax.set_title(f"head {head}", fontsize=TEXT_PT, pad=2)
            for axis in (ax.xaxis, ax.yaxis):
                axis.set_major_locator(MaxNLocator(nbins=3, integer=True))
            ax.tick_params(labelsize=TEXT_PT, length=2, pad=1)
        fig.supxlabel("key", fontsize=TEXT_PT)
        fig.supylabel("query", fontsize=TEXT_PT)
        bar = fig.colorbar(image, ax=axes, shrink=0.9, aspect=30, ticks=[0, 0.5, 1])
        bar.set_label("attention probability", fontsize=TEXT_PT)
        bar.ax.tick_params(labelsize=TEXT_PT)
        fig.suptitle("\n".join(lines), fontsize=TITLE_PT)
        fig.savefig(path, dpi=ATTENTION_DPI)
    plt.close(fig)
