"""The tiers' watch (``tests/conftest.py``) sees a Python process however it is started."""

import sys

from tests.conftest import _python


def test_a_python_process_is_seen_directly_or_through_another_command():
    assert _python(None, [sys.executable, "scripts/train.py"])
    assert _python(None, "python -c pass")
    script = (
        "cd /repo && .venv/bin/python scripts/train.py pe=rope"  # tests/reliability/test_storage
    )
    assert _python(None, ["unshare", "-rm", "sh", "-c", script])
    assert not _python(None, ["git", "rev-parse", "HEAD"])
    assert not _python(None, ["pdflatex", "-interaction=nonstopmode", "table.tex"])
