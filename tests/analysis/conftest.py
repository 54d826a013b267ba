"""Fixtures of the analysis tests."""

import matplotlib.pyplot as plt
import pytest

from pelab.analysis import report


@pytest.fixture
def tables_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """``make_table.py`` without writing its figures (each is closed as drawn, and the report
    page has none): for tests that read its tables, notes and plans. Half of a call's time is
    saving figures; what they show is checked by test_plots.py and test_html_report.py, and the
    README's ``make_table.py`` commands write them (tests/test_readme.py)."""
    monkeypatch.setattr(report, "save", lambda fig, stem: plt.close(fig) or [])
