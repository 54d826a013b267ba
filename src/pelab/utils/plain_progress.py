"""Training progress where no bar draws: output that is no terminal (a pipe, a file, ``nohup``,
a SLURM job, a parallel sweep's job log), where pelab turns Lightning's bar off, or
``trainer.enable_progress_bar=false``. One plain line per validation, through pelab's logger,
so to the console and the run's log file (``train.log``)::

    step 400/4000: loss 0.412, worst in-distribution exact match 87.5% (validation), 11.2
    steps/s, ETA 5 min

(one line; for a stack of members the loss is their mean, the exact match the worst of them).

Everything it reads is on the host by the end of a validation (its scores, the loss last
logged), so it adds no wait on the device."""

from __future__ import annotations

import logging
import time

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn

from pelab.utils.console import duration

log = logging.getLogger(__name__)


class PlainProgress(Callback):
    """Logs ``progress_line`` after each validation of training when the trainer has no
    progress bar; rate and ETA count this attempt's steps only (a resumed run's too)."""

    def __init__(self) -> None:
        self.start_step, self.start_time = 0, 0.0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.start_step, self.start_time = trainer.global_step, time.monotonic()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        fitting = trainer.state.fn == TrainerFn.FITTING  # not trainer.validate's
        if trainer.sanity_checking or trainer.progress_bar_callback is not None or not fitting:
            return
        step = trainer.global_step
        rate = (step - self.start_step) / max(time.monotonic() - self.start_time, 1e-9)
        loss = trainer.callback_metrics.get("train/loss")
        log.info(
            progress_line(
                step,
                trainer.max_steps,
                None if loss is None else float(loss),
                worst_in_distribution(pl_module),
                rate,
            )
        )


def worst_in_distribution(model: L.LightningModule) -> tuple[float, int, int] | None:
    """The lowest exact match at an in-distribution length in the last validation, over the
    members it scored (those still training), how many it scored and how many the run has;
    None before any."""
    members = model.validated  # pelab.lit_module.SequenceModel's
    worst = [
        scores["exact_match"]
        for k in members
        for length, scores in model.members[k].scores.get("val", {}).items()
        if model.task.in_distribution(length)
    ]
    return (min(worst), len(members), len(model.members)) if worst else None


def progress_line(
    step: int,
    max_steps: int,
    loss: float | None,
    worst: tuple[float, int, int] | None,
    rate: float,
) -> str:
    """``step 400/4000: loss 0.412, worst in-distribution exact match 87.5% (validation),
    11.2 steps/s, ETA 5 min``; ``worst``: the exact match, the members it is the worst of and
    the run's members (a stack: said)."""
    parts = [] if loss is None else [f"loss {loss:.3g}"]
    if worst is not None:
        value, scored, members = worst
        among = ""
        if members > 1:
            among = f", worst of {members} members"
            if scored < members:
                among = f", worst of the {scored} of {members} members still training"
        parts.append(f"worst in-distribution exact match {value:.1%} (validation{among})")
    parts.append(f"{rate:.3g} steps/s")
    if rate > 0 and max_steps > step:
        parts.append(f"ETA {duration((max_steps - step) / rate)}")
    return f"step {step}/{max_steps}: " + ", ".join(parts)


class TestProgress(Callback):
    """A line when the test (or a re-evaluation) starts a length that takes a while, and then
    every ``every_s`` seconds of it: ``testing length 2048 (4 of 4): batch 3/16, about 7 min
    left at this length``, bar or not (a bar shows one length's batches, not the test's end)."""

    def __init__(self, every_s: float = 30.0) -> None:
        self.every_s = every_s
        self.length_start = self.last = 0.0
        self.current: int | None = None

    def on_test_batch_end(
        self, trainer, pl_module, outputs, batch, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        now = time.monotonic()
        if dataloader_idx != self.current:  # the first batch of a length is done
            self.current, self.length_start, self.last = dataloader_idx, now, now
        if now - self.last < self.every_s:
            return
        self.last = now
        lengths = pl_module.lengths["test"]  # pelab.lit_module.SequenceModel's
        total = trainer.num_test_batches[dataloader_idx]
        done = batch_idx + 1
        left = (now - self.length_start) / max(done - 1, 1) * (total - done)
        log.info(
            "testing length %d (%d of %d): batch %d/%d, about %s left at this length",
            lengths[dataloader_idx],
            dataloader_idx + 1,
            len(lengths),
            done,
            total,
            duration(left),
        )
