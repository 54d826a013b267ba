"""What a run's console shows, piped as a log file is: its own lines, its table and its learned
line at the end; third-party chatter (Lightning's hints and info, deprecation warnings, W&B's
history) goes to the run's log file only, and no progress bar writes ``\\r``."""

import os
import subprocess
import sys

import pytest

from tests.conftest import TINY

NOISE = (
    "srun",
    "litlogger",
    "LeafSpec",
    "anonymous setting",
    "Run history",
    "Run summary",
    "GPU available",
    "callbacks used to create the checkpoint",
)


@pytest.mark.parametrize("stack", [[], ["seeds=[0,1]"]], ids=["plain", "members"])
@pytest.mark.integration
def test_a_piped_run_ends_with_its_table_and_learned_line(repo_root, tmp_path, stack):
    out = tmp_path / "run"
    env = {**os.environ, "WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1"}
    env.pop("WANDB_SILENT", None)
    proc = subprocess.run(
        [sys.executable, "scripts/train.py", *TINY, *stack]
        + [f"hydra.run.dir={out}", f"paths.cache_dir={tmp_path / 'cache'}"],
        cwd=repo_root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    console = proc.stdout
    assert proc.returncode == 0, console[-3000:]
    assert "\r" not in console
    assert [n for n in NOISE if n in console] == []
    lines = [line for line in console.splitlines() if line.strip()]
    assert lines[-1].startswith(("learned at step", "NOT learned by the cap")), lines[-5:]
    assert lines[-2].startswith("└")  # the table just above it
    log = (out / "train.log").read_text()
    assert "GPU available" in log  # the chatter is kept, in the run's log file


def test_the_progress_bar_shows_the_loss_last_logged_read_when_it_refreshes():
    """The loss is no ``prog_bar`` metric (Lightning would read it on the host after every
    step): the bar reads the last one logged when it refreshes."""
    from types import SimpleNamespace

    import torch

    from pelab.utils.progress import StepProgressBar

    trainer = SimpleNamespace(loggers=[], progress_bar_metrics={"val/id/exact_match": 0.5})
    trainer.callback_metrics = {"train/loss": torch.tensor(1.23456)}
    shown = StepProgressBar().get_metrics(trainer, None)
    assert shown == {"val/id/exact_match": 0.5, "train/loss": "1.23"}
    trainer.callback_metrics = {}  # before the first logging step
    assert "train/loss" not in StepProgressBar().get_metrics(trainer, None)
