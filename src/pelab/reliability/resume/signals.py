"""The signals a run answers, each at the end of a training step, so it stops at a point it can
resume from exactly:

- ``CheckpointOnSigterm``: on SIGTERM (pre-emption, a SLURM time limit, ``kill``) or Ctrl-C
  saves ``last.ckpt`` at the end of the current step, before the run stops.
- ``RequeueAtStepEnd``: answers SLURM's requeue signal at the end of a step: saves ``last.ckpt``
  there, then requeues the job.
- ``exit_status_on_sigterm``: a run stopped by SIGTERM exits with 143, as a killed process does.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.exceptions import SIGTERMException

from pelab.reliability.cluster import requeue

log = logging.getLogger(__name__)


def validation_due(trainer: L.Trainer, batch_idx: int) -> bool:
    """Whether Lightning validates after training batch ``batch_idx`` (step-based intervals)."""
    interval = trainer.val_check_batch
    last = batch_idx + 1 >= trainer.num_training_batches
    return last or (interval not in (None, float("inf")) and (batch_idx + 1) % interval == 0)


class CheckpointOnSigterm(Callback):
    """Saves ``<dirpath>/last.ckpt`` at the end of the step during which SIGTERM or Ctrl-C
    (SIGINT) arrived; the run then stops (Lightning's ``SIGTERMException``, or
    ``KeyboardInterrupt``) and a re-run in the same directory resumes there. Ctrl-C is taken
    over only from Python's own handler (a process that ignores SIGINT still does); a second
    Ctrl-C stops at once.

    One exception: when a validation is due after that step, Lightning would skip it on resume
    (it treats a checkpoint saved at a step's end as past that step's validation), so the
    checkpoint of the previous validation is kept instead: the resumed run repeats those steps
    and still ends with the uninterrupted run's numbers.

    During a validation or the test, Lightning only notes SIGTERM (its loops look at it between
    training steps), so a long evaluation would run on; there SIGTERM stops the run at once, as
    Ctrl-C does (nothing is lost: the run resumes from its last checkpoint and evaluates again).
    """

    def __init__(self, dirpath: str | Path, filename: str = "last.ckpt") -> None:
        self.path = Path(dirpath) / filename
        self._outside: Any = None  # the SIGTERM handler outside an evaluation
        self._lightning: Any = None  # Lightning's SIGTERM handler, called once the step is saved
        self._noted = False
        self._ctrl_c = False  # Ctrl-C noted during training

    def on_train_start(self, trainer: L.Trainer, pl_module) -> None:
        """Take SIGTERM over from Lightning for training: Lightning stops right after the step
        during which its handler ran, so a signal landing after this callback's step end (and
        before Lightning's check) would stop the run without a checkpoint. Here the signal is
        only noted, and Lightning's handler runs once the step's checkpoint is saved."""
        if threading.current_thread() is threading.main_thread():
            self._lightning = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, self._note)
        self._take_ctrl_c()

    def _note(self, signum: int, frame: Any) -> None:
        self._noted = True

    def _take_ctrl_c(self) -> None:
        """Note Ctrl-C for the step's end, where Python's own handler would raise at once."""
        if threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                signal.signal(signal.SIGINT, self._note_ctrl_c)

    def _note_ctrl_c(self, signum: int, frame: Any) -> None:
        if self._ctrl_c:  # pressed again: stop now
            raise KeyboardInterrupt
        self._ctrl_c = True

    def _give_ctrl_c_back(self) -> None:
        if signal.getsignal(signal.SIGINT) == self._note_ctrl_c:
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def _stop_if_ctrl_c(self) -> None:
        if self._ctrl_c:
            self._ctrl_c = False
            raise KeyboardInterrupt

    def on_validation_start(self, trainer: L.Trainer, pl_module) -> None:
        self._stop_at_once()

    def on_validation_end(self, trainer: L.Trainer, pl_module) -> None:
        self._restore()
        self._take_ctrl_c()  # training goes on

    def on_train_end(self, trainer: L.Trainer, pl_module) -> None:
        self._give_ctrl_c_back()
        self._stop_if_ctrl_c()

    def on_test_start(self, trainer: L.Trainer, pl_module) -> None:
        self._stop_at_once()

    def on_test_end(self, trainer: L.Trainer, pl_module) -> None:
        self._restore()

    def on_exception(self, trainer: L.Trainer, pl_module, exception: BaseException) -> None:
        self._restore()
        self._give_ctrl_c_back()

    def _stop_at_once(self) -> None:
        self._give_ctrl_c_back()
        self._stop_if_ctrl_c()  # noted since the last step's end
        if threading.current_thread() is not threading.main_thread():
            return
        self._outside = signal.getsignal(signal.SIGTERM)

        def stop(signum: int, frame: Any) -> None:
            log.warning("SIGTERM during an evaluation: stopping now")
            raise SIGTERMException

        signal.signal(signal.SIGTERM, stop)

    def _restore(self) -> None:
        if self._outside is not None:
            signal.signal(signal.SIGTERM, self._outside)
            self._outside = None

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx) -> None:
        sigterm = self._noted or trainer.received_sigterm
        if not (sigterm or self._ctrl_c):
            return
        name = "SIGTERM" if sigterm else "Ctrl-C"
        if validation_due(trainer, batch_idx):
            log.warning(
                "%s at step %d, where a validation is due: keeping %s from the previous "
                "validation (resuming from this step would skip the validation)",
                name,
                trainer.global_step,
                self.path,
            )
        else:
            trainer.save_checkpoint(self.path)
            log.warning("%s: saved %s at step %d", name, self.path, trainer.global_step)
        if not sigterm:
            self._stop_if_ctrl_c()  # Lightning stops the run, exit status 1
        self._noted = False
        if callable(self._lightning):
            self._lightning(signal.SIGTERM, None)  # Lightning stops after this step
        else:
            raise SIGTERMException


class RequeueAtStepEnd(Callback):
    """SLURM's requeue signal (``SIGUSR1``, sent ``--signal=USR1@90`` seconds before the time
    limit) during training, answered at the end of a step: ``<dirpath>/last.ckpt`` is saved
    there, then the job requeues and ends (``pelab.reliability.cluster.requeue.handle``), and the
    requeued job resumes from that step exactly.

    Not mid-step, where a checkpoint would hold a half-done step that Lightning replays off by
    one; and not at a step after which a validation is due (Lightning would skip that validation
    on resume): the next step's end serves, or, at the last step, the checkpoint of that
    validation. Off SLURM (no ``SLURM_JOB_ID``) nothing handles the signal and this does
    nothing."""

    def __init__(self, dirpath: str | Path, filename: str = "last.ckpt", signum="SIGUSR1") -> None:
        self.path = Path(dirpath) / filename
        self.signum = getattr(signal, signum)
        self._outside: Any = None  # the handler outside training, given back when it ends
        self._received = False

    def on_train_start(self, trainer: L.Trainer, pl_module) -> None:
        if requeue.job_id() is None or threading.current_thread() is not threading.main_thread():
            return
        self._outside = signal.getsignal(self.signum)
        signal.signal(self.signum, self._note)

    def _note(self, signum, frame) -> None:
        self._received = True

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not self._received or validation_due(trainer, batch_idx):
            return
        self._received = False
        trainer.save_checkpoint(self.path)
        log.warning("SIGUSR1: saved %s at step %d", self.path, trainer.global_step)
        for logger in trainer.loggers:  # what they hold goes to disk: the process ends next
            logger.finalize("finished")
        requeue.handle(self.signum, None)

    def on_train_end(self, trainer: L.Trainer, pl_module) -> None:
        self._release(requeue_pending=True)

    def on_exception(self, trainer: L.Trainer, pl_module, exception: BaseException) -> None:
        self._release(requeue_pending=False)

    def _release(self, requeue_pending: bool) -> None:
        """Give the signal back; a signal noted at the last step (where a validation was due)
        requeues now, from the checkpoint of that validation."""
        if self._outside is None:
            return
        signal.signal(self.signum, self._outside)
        self._outside = None
        if requeue_pending and self._received:
            self._received = False
            requeue.handle(self.signum, None)


@contextmanager
def exit_status_on_sigterm() -> Iterator[None]:
    """Lightning stops a run on SIGTERM with ``SIGTERMException``, a ``SystemExit`` whose status 0
    would tell a scheduler the job succeeded; exit with 143 (128 + SIGTERM) instead, as a process
    killed by SIGTERM does."""
    try:
        yield
    except SIGTERMException as error:
        raise SystemExit(128 + signal.SIGTERM) from error
