"""The layout of pelab's ``.tex`` tables (``for_pdflatex``): in one column of a two-column
article (``table``) or across both (``table*``), as ``--tex-span`` chooses (``SPANS``; ``auto``
by the table's natural width), shrunk to the line where wider and never enlarged, with the
packages it needs named in its first line. Light (pandas only): ``make_table.py --help`` reads
``SPANS``."""

from __future__ import annotations

import pandas as pd

from pelab.errors import ConfigError

LATEX_PACKAGES = "booktabs,graphicx"  # \toprule..., \resizebox
# --tex-span: a .tex table in one column of a two-column article (``table``), across both
# (``table*``; in a one-column article the same as ``table``), or chosen by its width
SPANS = ("auto", "column", "page")
COLUMN_PT = 241.0  # \columnwidth of a two-column article at 10 pt (article, twocolumn)
CHAR_PT = 5.0  # about a character's width at 10 pt, to estimate a table's natural width
GAP_PT = 12.0  # \tabcolsep on both sides of a column
SHRINK = 0.8  # auto spans both columns where one column would shrink the table below this


def natural_width(table: pd.DataFrame) -> float:
    """About the width in points of ``table`` (its row labels and cells) typeset at 10 pt."""
    index = table.index.to_frame(index=False)
    parts = [*(index[c].astype(str) for c in index), *(table[c].astype(str) for c in table)]
    names = [*map(str, index.columns), *(" ".join(map(str, _tuple(c))) for c in table.columns)]
    widest = [max([len(n), *part.str.len()]) for n, part in zip(names, parts, strict=True)]
    return sum(w * CHAR_PT + GAP_PT for w in widest)


def _tuple(column: object) -> tuple:
    return column if isinstance(column, tuple) else (column,)


def for_pdflatex(latex: str, table: pd.DataFrame, span: str) -> str:
    """A ``table`` in one column, or a ``table*`` across both (``span``; ``auto``: across both
    when one column would shrink it below ``SHRINK`` of its natural width), its tabular shrunk
    to the line width where wider, never enlarged; headed by the packages it needs."""
    if span not in SPANS:
        raise ConfigError(f"unknown --tex-span {span!r}; valid choices: {', '.join(SPANS)}")
    wide = span == "page" or (span == "auto" and natural_width(table) * SHRINK > COLUMN_PT)
    if wide:
        latex = latex.replace("\\begin{table}", "\\begin{table*}", 1)
        latex = latex.replace("\\end{table}", "\\end{table*}", 1)
    fit = "\\resizebox{\\ifdim\\width>\\linewidth\\linewidth\\else\\width\\fi}{!}{%\n"
    latex = latex.replace("\\begin{tabular}", fit + "\\begin{tabular}", 1)
    latex = latex.replace("\\end{tabular}\n", "\\end{tabular}}\n", 1)
    return f"% needs \\usepackage{{{LATEX_PACKAGES}}}\n{latex}"


def latex_escape(text: str) -> str:
    """Escape LaTeX's special characters in plain text (captions)."""
    special = {"\\": r"\textbackslash{}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
    special |= {c: "\\" + c for c in "&%$#_{}"}
    return "".join(special.get(c, c) for c in text)
