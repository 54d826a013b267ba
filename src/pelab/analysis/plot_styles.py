"""How a figure tells its rows apart (``pelab.analysis.plots``): each row's colour, marker and
line style (``row_styles``: distinct for up to 40 rows; a baseline's rows named and coloured
when few, ``FEW_ROWS``, else grey), its label in words (``row_labels``), and a heatmap cell's
colour against the chance level (``above_chance``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd
from matplotlib import colormaps

from pelab.analysis.baseline import ORIGIN, YOURS
from pelab.analysis.frames import NOT_SET

COLORS = colormaps["tab10"].colors
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
LINESTYLES = ("-", "--", "-.", (0, (5, 1, 1, 1, 1, 1)))  # dotted (":") is the chance level's
GREY = "0.62"  # the baseline's lines
FEW_ROWS = 6  # up to this many rows in all, a baseline's rows are drawn like yours, each named
NO_SCORE_GREY = "0.85"  # a heatmap cell without a score


@dataclass(frozen=True)
class Style:
    """How one row of the table is drawn: markers shrink row by row (``row_styles``), so rows
    on the same point (five encodings at 0 beyond the training lengths) show as concentric
    rings, each colour visible, every point at its measured value. ``thin``: drawn as a thin
    line beneath the others, without error bars (a baseline's rows among many)."""

    color: str | tuple[float, ...]
    marker: str
    linestyle: str | tuple
    size: float = 4.0
    thin: bool = False


BASELINE_STYLE = Style(GREY, ".", "-", size=3.0, thin=True)


def series_style(i: int) -> Style:
    """The ``i``-th row's style: the colour changes every row, the line style every
    ``len(COLORS)`` rows, and the marker shifts by one each such cycle, so the first 40 rows
    differ in colour or line style and no two neighbours share a marker."""
    cycle = i // len(COLORS)
    return Style(
        COLORS[i % len(COLORS)],
        MARKERS[(i + cycle) % len(MARKERS)],
        LINESTYLES[cycle % len(LINESTYLES)],
    )


def row_settings(key: object, rows: list[str]) -> dict[str, object]:
    """A row's key as ``{row axis: value}``."""
    return dict(zip(rows, key if isinstance(key, tuple) else (key,), strict=True))


def row_labels(
    keys: list[object], rows: list[str], renames: dict[str, str] | None = None
) -> dict[object, str]:
    """Each row of the figure in words, short: the encoding, then only the settings the rows
    differ in, by their last name (``rope · attn_scale=ssmax``; a row at a setting's default
    shows nothing of it), renamed by ``renames`` (``--label``: a whole label or one of its
    parts, ``attn_scale=ssmax`` -> ``SSMax``), the baseline's rows as yours. Only a label that
    rows of different origins share (your ``rope`` and the baseline's ``rope``, its control)
    says whose each is: ``rope (yours)``, ``rope (ablation_cpu)``; ``renames`` may rename such a
    label whole too (``rope (ablation_cpu)`` -> ``RoPE, shipped``)."""
    renames = renames or {}
    values = [row_settings(key, rows) for key in keys]
    varying = [
        row
        for row in rows
        if row not in ("pe", ORIGIN) and len({str(v.get(row)) for v in values}) > 1
    ]
    last = [row.rsplit(".", 1)[-1] for row in varying]
    names = {
        row: short if last.count(short) == 1 else row
        for row, short in zip(varying, last, strict=True)
    }
    plain, labels = {}, {}
    for key, value in zip(keys, values, strict=True):
        words = [str(value["pe"])] if "pe" in value else []
        words += [f"{names[r]}={value[r]}" for r in varying if value.get(r) != NOT_SET]
        plain[key] = " · ".join(words) or "all runs"
        if plain[key] in renames:
            labels[key] = renames[plain[key]]
        else:
            labels[key] = " · ".join(renames.get(w, w) for w in plain[key].split(" · "))
    origins: dict[str, set[object]] = {}
    for key, value in zip(keys, values, strict=True):
        origins.setdefault(labels[key], set()).add(value.get(ORIGIN))
    for key, value in zip(keys, values, strict=True):
        if len(origins[labels[key]]) > 1:  # shared by your row and a baseline's
            whose = value.get(ORIGIN)
            labels[key] = (
                renames.get(f"{plain[key]} ({whose})", renames.get(f"{labels[key]} ({whose})"))
                or f"{labels[key]} ({whose})"
            )
    return labels


def baseline_of(key: object, rows: list[str]) -> str | None:
    """The baseline a row's runs come from (``--baseline``), or None for the user's rows."""
    origin = row_settings(key, rows).get(ORIGIN)
    return None if origin in (None, YOURS) else str(origin)


def row_styles(runs: pd.DataFrame, rows: list[str]) -> dict[object, Style]:
    """One style per row of the table, the same in every panel and figure of a sweep: the
    user's rows ``series_style`` in their order of appearance in ``runs`` (whatever became of
    their runs); a baseline's row of an encoding the user ran, that row's control, dashed in its
    colour; the baseline's other rows, up to ``FEW_ROWS`` rows in all (``--filter pe=...``), the
    next series styles, else ``BASELINE_STYLE`` (a zoo of 25 grey lines beneath yours)."""
    keys = runs[rows].drop_duplicates().itertuples(index=False, name=None)
    keys = [key if len(rows) > 1 else key[0] for key in keys]
    few = len(keys) <= FEW_ROWS
    mine = [key for key in keys if baseline_of(key, rows) is None]
    # a baseline's row of an encoding you ran is your row's control: its colour, dashed
    colour = {row_settings(key, rows).get("pe"): i for i, key in reversed(list(enumerate(mine)))}
    controls = {
        key: colour[pe]
        for key in keys
        if key not in mine and (pe := row_settings(key, rows).get("pe")) in colour
    }
    coloured = mine + [k for k in keys if few and k not in mine and k not in controls]
    last = max(len(coloured) - 1, 1)
    styles = {  # markers from 8 down to 3 points: concentric where rows meet
        key: replace(series_style(i), size=8.0 - 5.0 * i / last) for i, key in enumerate(coloured)
    }
    for key, i in controls.items():
        styles[key] = Style(series_style(i).color, ".", "--", size=3.0, thin=not few)
    return {key: styles.get(key, BASELINE_STYLE) for key in keys}


def above_chance(score: float, chance: float) -> float:
    """Where ``score`` lies relative to ``chance`` (both fractions; no chance level: 0): -1 at
    0, 0 at chance, 1 at 100%, linear on each side: a heatmap cell's colour, white at every
    column's own chance level."""
    chance = 0.0 if pd.isna(chance) else float(chance)
    if score >= chance:
        return (score - chance) / (1 - chance) if chance < 1 else 0.0
    return (score - chance) / chance
