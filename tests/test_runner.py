"""The shared pieces of a job: its trainer, callbacks and loggers."""

from pathlib import Path

import pytest
from lightning.pytorch.callbacks import ProgressBar

from pelab import runner
from pelab.runner import configured_callbacks
from pelab.train import run
from tests.conftest import TINY, compose_config


@pytest.mark.integration
def test_no_logger_and_no_progress_bar_train_a_complete_run(tmp_path):
    """``logger=none`` and ``trainer.enable_progress_bar=false`` (Lightning refuses a progress
    bar callback then) are a quiet run with its record and checkpoints."""
    quiet = ["logger=none", "trainer.enable_progress_bar=false"]
    cfg = compose_config([*TINY, *quiet], tmp_path)
    assert not any(isinstance(c, ProgressBar) for c in configured_callbacks(cfg))
    record = run(cfg)
    out = Path(cfg.paths.output_dir)
    assert record["status"] == "completed", record.get("error")
    assert (out / "checkpoints" / "best.ckpt").is_file()
    assert not (out / "csv").exists() and not (out / "wandb").exists()


def test_the_progress_bar_is_configured_by_default_on_a_terminal(tmp_path, monkeypatch):
    cfg = compose_config(TINY, tmp_path)
    monkeypatch.setattr(runner, "interactive", lambda: True)
    assert any(isinstance(c, ProgressBar) for c in configured_callbacks(cfg))
    monkeypatch.setattr(runner, "interactive", lambda: False)  # a pipe: no \r lines
    assert not any(isinstance(c, ProgressBar) for c in configured_callbacks(cfg))
