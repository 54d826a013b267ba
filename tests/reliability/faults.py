"""A test instrument: ``InjectFault`` signals, kills, raises or pauses a run at a chosen step,
enabled only by a config override (the fault campaign, ``make test-faults``; the overrides:
``tests.reliability.runs.fault``). A run's own processes import it from the repository, its root
on ``PYTHONPATH`` (``runs.hooks_importable``)."""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import Callback

log = logging.getLogger(__name__)


FAULTS = ("sigterm", "sigkill", "sigint", "sigusr1", "raise", "pause", "mark")


class InjectFault(Callback):
    """Test hook: before training step ``at_step`` (after ``at_step`` optimizer steps), or test
    batch ``at_step`` with ``during=test``, send this process SIGTERM / SIGKILL / SIGINT /
    SIGUSR1, raise ``RuntimeError``, pause (sleep until killed, or ``seconds``), or only mark
    the moment (``mark``: create ``marker`` and go on). Enabled only by a config override, e.g.
    ``+callbacks.fault._target_=tests.reliability.faults.InjectFault
    +callbacks.fault.at_step=3 +callbacks.fault.action=sigterm``."""

    def __init__(
        self,
        at_step: int,
        action: str,
        marker: str | None = None,
        seed: int | None = None,
        during: str = "train",
        seconds: float | None = None,
    ) -> None:
        """``marker``: a file created when the fault fires, for a test to wait on; ``seconds``:
        how long ``pause`` sleeps (default: until the process is killed); ``seed``: fire
        only in the job that trains a member of this seed (one job of a sweep, or the stack
        whose ``seeds`` hold it: the fault ends the job, every member with it);
        ``during``: ``train`` (before training step ``at_step``) or ``test`` (before test batch
        ``at_step``)."""
        if action not in FAULTS:
            raise ValueError(f"unknown fault {action!r}; valid choices: {FAULTS}")
        if during not in ("train", "test"):
            raise ValueError(f"unknown phase {during!r}; valid choices: train, test")
        self.at_step, self.action, self.marker, self.seed = at_step, action, marker, seed
        self.during, self.seconds = during, seconds

    def on_train_batch_start(self, trainer: L.Trainer, pl_module, batch, batch_idx) -> None:
        if self.during == "train" and trainer.global_step == self.at_step:
            self._fire(pl_module)

    def on_test_batch_start(
        self, trainer: L.Trainer, pl_module, batch, batch_idx, dataloader_idx=0
    ) -> None:
        if self.during == "test" and batch_idx == self.at_step:
            self._fire(pl_module)

    def _fire(self, pl_module) -> None:
        if self.seed is not None and self.seed not in [m.seed for m in pl_module.members]:
            return
        log.warning("injecting fault %r at step %d", self.action, self.at_step)
        if self.marker:
            Path(self.marker).touch()
        if self.action == "raise":
            raise RuntimeError(f"injected fault at step {self.at_step}")
        if self.action == "mark":
            return
        if self.action == "pause":
            end = time.monotonic() + (float("inf") if self.seconds is None else self.seconds)
            while time.monotonic() < end:
                time.sleep(0.05)
            return
        os.kill(os.getpid(), getattr(signal, self.action.upper()))
