"""One self-contained HTML file per table set (``make_table.py`` writes ``report.html`` beside the
tables): the tables with every metric side by side and their legend, the figures (embedded PNG),
every run that did not complete or did not learn its task, the command of every job and the
versions that ran them; a file to open in a browser or attach to a message, with nothing beside
it."""

from __future__ import annotations

import base64
import html
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from pelab import provenance
from pelab.analysis import reference_tables
from pelab.analysis.cells import column_header, column_notes, metric_name, pivot
from pelab.analysis.render import LEGEND, LOOKS_NOTE, not_completed
from pelab.analysis.table import Ablation
from pelab.resume_commands import started_with

STYLE = (
    "body{font-family:sans-serif;margin:2em;max-width:1400px}"
    "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px}"
    "th{background:#f3f3f3}img{max-width:100%}code{background:#f3f3f3;padding:0 3px}"
)


# section headings for the tables' and figures' file stems
HEADINGS = {
    "table_tasks": "By task: in and out of distribution",
    "table_lengths": "By evaluation length",
    "length_curves": "Score against length",
    "heatmap": "Score by encoding and length, against chance",
}


def heading(stem: str) -> str:
    """A file stem in words: ``length_curves.token_acc`` -> ``Score against length: token
    acc``."""
    name, _, metric = stem.partition(".")
    words = HEADINGS.get(name, name.replace("_", " ").capitalize())
    return f"{words}: {metric_name(metric)}" if metric else words


def markdown_bold(text: str) -> str:
    """Escaped ``text`` with Markdown's ``**bold**`` as HTML."""
    return re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", html.escape(text))


def table_html(stats: pd.DataFrame, rows: list[str], cols: list[str]) -> str:
    """A table as HTML, its best cells bold (as in the Markdown table), the row labels as
    columns (no header row of index names), one header row per column key in words (task,
    split or length, metric); under it, the columns without a bold cell and why
    (``cells.column_notes``)."""
    table, best = pivot(stats, rows, cols)
    table = table.map(html.escape).where(~best, "<b>" + table.map(html.escape) + "</b>")
    table.columns = pd.MultiIndex.from_tuples([column_header(c, stats) for c in table.columns])
    page = table.reset_index().to_html(escape=False, index=False)
    return page + "".join(f"<p>{html.escape(n)}</p>" for n in column_notes(stats, cols))


def unlearned(runs: pd.DataFrame, rows: list[str]) -> list[str]:
    """The completed runs that did not learn their task in distribution (``learned`` False)."""
    chosen = runs[(runs["status"] == "completed") & runs["learned"].eq(False)]
    return [
        f"{' · '.join(str(run[c]) for c in [*rows, 'task'])} · seed {run['seed']}: "
        f"ID exact match {run['id/exact_match']:.1%} ({run['source']})"
        for _, run in chosen.iterrows()
    ]


def commands(records: Sequence[dict[str, Any]]) -> list[str]:
    """The command that started every job, once each: its overrides as Hydra saved them, less
    what a resume added (``resume_commands.started_with``); for a record without them (a
    shipped baseline's: no Hydra files), the choices and the seeds it recorded."""
    script = {"train": "scripts/train.py", "eval": "scripts/eval.py"}
    lines = set()
    for r in records:
        overrides = r.get("overrides")
        words = started_with(overrides) if overrides else from_record(r)
        if words is not None:
            name = script.get(r.get("job_type", "train"), "scripts/train.py")
            lines.add(shlex.join(["python", name, *words]))
    return sorted(lines)


def from_record(record: dict[str, Any]) -> list[str] | None:
    """The overrides that start ``record``'s job again: its preset first, then every config
    group it chose, then its seeds (a stack's, or its one seed); None for a record without
    choices (collect's crashed or missing jobs)."""
    choices = dict(record.get("choices") or {})
    if not choices:
        return None
    seed = choices.pop("seed", None)
    first = [f"experiment={choices.pop('experiment')}"] if "experiment" in choices else []
    seeds = (record.get("member_of") or {}).get("seeds")
    members = [f"seeds=[{','.join(map(str, seeds))}]"] if seeds else []
    single = [f"seed={seed}"] if seed is not None and not seeds else []
    return [*first, *(f"{k}={v}" for k, v in choices.items()), *members, *single]


def versions(records: Sequence[dict[str, Any]]) -> list[str]:
    """Every distinct environment the runs recorded: library versions and the code that ran
    (its commit, and what differed from it: ``provenance.summary``)."""
    seen = {
        (
            ", ".join(f"{k} {v}" for k, v in (r.get("versions") or {}).items()),
            provenance.summary(r),
        )
        for r in records
        if r.get("versions")
    }
    return [f"{libs}; commit {commit}" for libs, commit in sorted(seen)]


def write_html(
    result: Ablation,
    records: Sequence[dict[str, Any]],
    figures: Sequence[Path],
    out: Path,
    versus: tuple | None = None,
    looks: Sequence[str] = (),
) -> Path:
    """``out/report.html``: the whole report in one file (see the module docstring); with
    ``versus`` (``reference.versus``'s comparisons of the first metric, the rows, the
    reference and the family in words) its table, and the ``looks`` recorded."""

    def items(lines: list[str]) -> str:
        listed = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
        return f"<ul>{listed}</ul>" if lines else "<p>none</p>"

    tasks = ", ".join(dict.fromkeys(str(t) for t in result.runs["task"]))
    title = f"pelab report: {tasks} ({len(result.runs)} runs)"
    parts = [f"<h1>{html.escape(title)}</h1>", f"<p>{html.escape(result.caption)}</p>"]
    parts += [f"<p>{markdown_bold(LEGEND)}</p>"]
    for table in result.side_by_side():
        parts += [
            f"<h2>{heading(table.stem)}</h2>",
            table_html(table.stats, result.rows, table.cols),
        ]
    if versus is not None:
        compared, rows, wanted, family = versus
        name = ", ".join(f"{k}={v}" for k, v in wanted.items())
        table = reference_tables.layout(compared, rows).map(html.escape).reset_index()
        parts += [
            f"<h2>Against the reference ({html.escape(name)})</h2>",
            table.to_html(escape=False, index=False),
            f"<p>{html.escape(reference_tables.caption(compared, wanted, family))}</p>",
        ]
    for figure in figures:
        if figure.suffix == ".png":
            data = base64.b64encode(figure.read_bytes()).decode()
            parts += [
                f"<h2>{html.escape(heading(figure.stem))}</h2>",
                f'<img src="data:image/png;base64,{data}">',
            ]
    parts += [
        "<h2>Runs that did not complete</h2>",
        items(not_completed(result.runs, result.rows)),
    ]
    parts += [
        "<h2>Runs that did not learn their task</h2>",
        items(unlearned(result.runs, result.rows)),
    ]
    parts += [f"<h2>{html.escape(LOOKS_NOTE)}</h2>", items(list(looks))]
    parts += ["<h2>Commands</h2>", items(commands(records))]
    parts += ["<h2>Versions</h2>", items(versions(records))]
    varying = [r for r in result.rows if r != "pe"]  # the settings whose values differ
    parts += [f"<p>Settings the runs vary: {html.escape(', '.join(varying) or 'none')}</p>"]
    page = "<!DOCTYPE html><html><head><meta charset='utf-8'>"
    page += f"<title>{html.escape(title)}</title>"
    page += f"<style>{STYLE}</style></head><body>{''.join(parts)}</body></html>\n"
    path = out / "report.html"
    path.write_text(page)
    return path
