"""What a run's console shows, piped as a log file is: its own lines, a plain progress line per
validation (no bar draws there), its table and its learned line at the end; third-party chatter
(Lightning's hints and info, deprecation warnings, W&B's history) goes to the run's log file
only, and no progress bar writes ``\\r``."""

import logging
import os
import re
import subprocess
from types import SimpleNamespace

import pytest

from tests import zygote
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


@pytest.mark.processes
@pytest.mark.parametrize("stack", [[], ["seeds=[0,1]"]], ids=["plain", "members"])
@pytest.mark.integration
def test_a_piped_run_ends_with_its_table_and_learned_line(repo_root, tmp_path, stack):
    out = tmp_path / "run"
    env = {**os.environ, "WANDB_MODE": "offline", "PYTHONUNBUFFERED": "1"}
    env.pop("WANDB_SILENT", None)
    proc = zygote.start(
        ["scripts/train.py", *TINY, *stack]
        + [f"hydra.run.dir={out}", f"paths.cache_dir={tmp_path / 'cache'}"],
        cwd=repo_root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    console, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, console[-3000:]
    assert "\r" not in console
    assert [n for n in NOISE if n in console] == []
    lines = [line for line in console.splitlines() if line.strip()]
    assert lines[-1].startswith(("learned at step", "NOT learned by the cap")), lines[-5:]
    assert lines[-2].startswith("└")  # the table just above it
    log = (out / "train.log").read_text()
    assert "GPU available" in log  # the chatter is kept, in the run's log file
    # TINY validates every 2 of 4 steps (and logs no loss before step 10)
    progress = r"step {}/4: worst in-distribution exact match \d+\.\d% \(validation.*steps/s"
    for step in (2, 4):
        assert re.search(progress.format(step), console), console[-3000:]
        assert re.search(progress.format(step), log)


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


def test_a_plain_progress_line_gives_step_loss_worst_in_distribution_rate_and_eta():
    from pelab.utils.plain_progress import progress_line

    assert progress_line(400, 4000, 0.41234, (0.875, 1, 1), 11.2) == (
        "step 400/4000: loss 0.412, worst in-distribution exact match 87.5% (validation), "
        "11.2 steps/s, ETA 5 min"
    )
    assert progress_line(4000, 4000, None, (0.5, 3, 3), 10.0) == (
        "step 4000/4000: worst in-distribution exact match 50.0% (validation, worst of 3 "
        "members), 10 steps/s"
    )
    assert "(validation, worst of the 1 of 3 members still training)" in progress_line(
        100, 200, None, (0.5, 1, 3), 1.0
    )


def test_plain_progress_reads_the_validation_it_follows_and_is_silent_beside_a_bar(caplog):
    """The worst of the in-distribution lengths (length 16 is not one), the loss last logged;
    nothing when a bar draws."""
    import torch
    from lightning.pytorch.trainer.states import TrainerFn

    from pelab.member_state import MemberState
    from pelab.utils.plain_progress import PlainProgress

    scores = {4: {"exact_match": 1.0}, 8: {"exact_match": 0.75}, 16: {"exact_match": 0.0}}
    model = SimpleNamespace(
        validated=[0],
        members=[MemberState(0, scores={"val": scores})],
        task=SimpleNamespace(in_distribution=lambda n: n <= 8),
    )
    trainer = SimpleNamespace(
        sanity_checking=False,
        progress_bar_callback=None,
        state=SimpleNamespace(fn=TrainerFn.FITTING),
        global_step=200,
        max_steps=400,
        callback_metrics={"train/loss": torch.tensor(0.5)},
    )
    progress = PlainProgress()
    with caplog.at_level(logging.INFO, logger="pelab.utils.plain_progress"):
        progress.on_validation_end(trainer, model)
        trainer.progress_bar_callback = object()
        progress.on_validation_end(trainer, model)
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("step 200/400: loss 0.5, worst in-distribution exact match 75.0% ")
