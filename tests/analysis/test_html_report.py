"""The HTML report: one file with the tables, the figures, the runs that failed or did not learn,
every job's command and the versions."""

import base64
import re

from pelab.analysis.collect import lengths_frame, runs_frame
from pelab.analysis.html_report import write_html
from pelab.analysis.plots import length_curves, save
from pelab.analysis.table import ablation
from tests.analysis.records import record

RECORDS = [
    record("rope", "copy", 0, {8: 1.0, 32: 0.5}, learned=True, steps_to_learn=300),
    record("alibi", "copy", 0, {8: 0.6, 32: 0.1}, learned=False),
    record("alibi", "copy", 1, status="failed"),
]
RECORDS[0] |= {"versions": {"torch": "2.13.0"}, "git_commit": "abc123", "git_dirty": False}


def test_the_report_is_one_file_with_tables_figures_failures_commands_and_versions(tmp_path):
    result = ablation(runs_frame(RECORDS), lengths_frame(RECORDS))
    figures = save(
        length_curves(result.runs, result.lengths, result.rows, "exact_match"), tmp_path / "c"
    )
    page = write_html(result, RECORDS, figures, tmp_path).read_text()
    assert page.startswith("<!DOCTYPE html>") and "<table" in page
    assert "<b>100.0 [–] (1/1)</b>" in page  # rope: the best ID cell, bold
    [png] = re.findall(r'src="data:image/png;base64,([^"]+)"', page)  # embedded, no file beside
    assert base64.b64decode(png) == (tmp_path / "c.png").read_bytes()
    assert "alibi · copy · seed 1: failed: ConfigError: deliberately broken" in page
    assert "alibi · copy · seed 0: ID exact match 60.0%" in page  # completed, not learned
    assert "python scripts/train.py pe=rope seed=0" in page
    assert "torch 2.13.0; commit abc123" in page
