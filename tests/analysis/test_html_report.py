"""The HTML report: one file with the tables, the figures, the runs that failed or did not learn,
every job's command and the versions."""

import base64
import re
from html.parser import HTMLParser

from pelab.analysis import baseline
from pelab.analysis.frames import lengths_frame, runs_frame
from pelab.analysis.html_report import commands, write_html
from pelab.analysis.plots import length_curves, save
from pelab.analysis.table import ablation
from tests.analysis.records import record

RECORDS = [
    record("rope", "copy", 0, {8: 1.0, 32: 0.5}, learned=True, steps_to_learn=300),
    record("alibi", "copy", 0, {8: 0.6, 32: 0.1}, learned=False),
    record("alibi", "copy", 1, status="failed"),
]
RECORDS[0] |= {"versions": {"torch": "2.13.0"}, "git_commit": "abc1234", "git_dirty": False}
# a run whose code was an untracked module: its changes and patch are named
RECORDS[1] |= {"versions": {"torch": "2.13.0"}, "git_commit": "abc1234", "git_dirty": True}
RECORDS[1] |= {"git_changes": ["?? src/pelab/pe/mine.py"], "git_patch": "diff ..."}
RECORDS[1] |= {"git_patch_sha256": "0123456789abcdef"}


def test_the_report_is_one_file_with_tables_figures_failures_commands_and_versions(tmp_path):
    result = ablation(runs_frame(RECORDS), lengths_frame(RECORDS))
    curves = length_curves(result.runs, result.lengths, result.rows, "token_acc")
    figures = save(curves, tmp_path / "length_curves.token_acc")
    page = write_html(result, RECORDS, figures, tmp_path).read_text()
    assert page.startswith("<!DOCTYPE html>") and "<table" in page
    assert "<b>100.0 [–] (1/1)</b>" in page  # rope: the best ID cell, bold
    [png] = re.findall(r'src="data:image/png;base64,([^"]+)"', page)  # embedded, no file beside
    assert base64.b64decode(png) == (tmp_path / "length_curves.token_acc.png").read_bytes()
    read = Page(page)
    assert "Score against length: token acc" in read.headings
    assert read.header_rows[:3] == [  # the task table: both metrics side by side
        ["pe", "copy"],
        ["", "ID", "OOD"],
        ["", "exact match", "token acc", "exact match", "token acc"],
    ]
    assert read.header_rows[4] == ["", "L=8 (ID)", "L=16 (ID)", "L=32 (OOD)"]  # by length
    assert "alibi · copy · seed 1: failed: ConfigError: deliberately broken" in page
    assert "alibi · copy · seed 0: ID exact match 60.0%" in page  # completed, not learned
    assert "python scripts/train.py pe=rope seed=0" in page
    assert "torch 2.13.0; commit abc1234 clean" in page
    dirty = "commit abc1234 + 1 changes (?? src/pelab/pe/mine.py); patch kept, sha256 01234567"
    assert dirty in page


class Page(HTMLParser):
    """What a reader of the page sees, by element: the title, the headings, each table's header
    rows (the text of each cell), and the text of the page."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.title, self.headings, self.header_rows, self.text = "", [], [], []
        self._in, self._row, self._thead = [], None, False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self._in.append(tag)
        if tag == "thead":
            self._thead = True
        if tag == "tr" and self._thead:
            self._row = []
            self.header_rows.append(self._row)
        if tag in ("th", "td") and self._row is not None:
            self._row.append("")

    def handle_endtag(self, tag):
        if self._in and self._in[-1] == tag:
            self._in.pop()
        if tag == "thead":
            self._thead, self._row = False, None

    def handle_data(self, data):
        where = self._in[-1] if self._in else ""
        if where == "title":
            self.title += data
        elif where in ("h1", "h2"):
            self.headings.append(data.strip())
        if self._row is not None and self._row and where in ("th", "td"):
            self._row[-1] += data.strip()
        if where not in ("style", "title"):
            self.text.append(data)


def test_a_reader_sees_no_markup_no_file_names_and_only_what_varies(tmp_path):
    """report.html checked at the DOM a browser builds from it (the standard library's HTML
    parser, no browser): no literal Markdown, human headings, a short title, no empty header
    row, the settings that really vary, and why a column has no bold cell."""
    records = [
        record("rope", "copy", 0, {8: 0.0, 32: 0.0}, overrides=["trainer.max_steps=300"]),
        record("alibi", "copy", 0, {8: 0.0, 32: 0.0}, overrides=["trainer.max_steps=300"]),
    ]
    for r in records:
        r["config"]["trainer"] = {"max_steps": 300}
    result = ablation(runs_frame(records), lengths_frame(records))
    figures = save(
        length_curves(result.runs, result.lengths, result.rows, "exact_match"), tmp_path / "c"
    )
    page = Page(write_html(result, records, figures, tmp_path).read_text())
    text = " ".join(page.text)
    assert "**" not in text
    assert page.title.startswith("pelab report: copy") and len(page.title) < 80
    assert not any("_" in heading for heading in page.headings), page.headings  # no file stems
    for row in page.header_rows:
        assert any(cell for cell in row[1:]), page.header_rows  # no row of empty headers
    assert "Settings the runs vary: none" in text  # trainer.max_steps is 300 in every run
    columns = ", ".join(
        f"copy {s} {m}" for s in ("ID", "OOD") for m in ("exact match", "token acc")
    )
    assert f"No bold in {columns}: every cell is 0.0." in text


def test_the_commands_are_those_that_started_each_job_also_for_a_baseline():
    """Issue 54: the report showed a bare ``python scripts/train.py`` for the shipped baseline
    (its records keep no Hydra files) and a sweep's re-run (``skip_completed=true``) instead of
    the command that started the job."""
    shipped = commands(baseline.load("ablation_cpu_3seeds"))  # the grid with seeds added later
    assert "python scripts/train.py" not in shipped and len(shipped) >= 75
    start = "python scripts/train.py experiment=ablation_cpu model=decoder pe=alibi task=copy"
    assert f"{start} positions=contiguous trainer=default 'seeds=[0,1,2]'" in shipped
    assert any(line.endswith("'seeds=[3,4]'") for line in shipped)  # seeds added later
    resumed = [{"overrides": ["pe=rope", "task=copy", "skip_completed=true", "+resume=true"]}]
    assert commands(resumed) == ["python scripts/train.py pe=rope task=copy"]
