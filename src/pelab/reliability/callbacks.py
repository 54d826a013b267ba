"""Lightning callbacks that make a run safe to kill and cheap to resume exactly.

- ``ResumeState``: stores the run's identity (``checkpoints.identity``) and torch's RNG state in
  every checkpoint and restores the RNG before the first step after a resume (Lightning does not
  save the global RNG, which dropout draws from in training).
- ``CheckpointOnSigterm``: on SIGTERM (pre-emption, a SLURM time limit, ``kill``) saves
  ``last.ckpt`` at the end of the current step, before Lightning stops the run.
- ``RequeueAtStepEnd``: answers SLURM's requeue signal at the end of a step: saves ``last.ckpt``
  there, then requeues the job.
- ``BestCheckpoints``: each member's ``best.ckpt``, in a single run's format, exact when a
  run resumes from a checkpoint written in another directory.
- ``ValidateLastStep``: validates (and so checkpoints) the last step when the validation
  interval does not divide ``trainer.max_steps``: a short run always saves its model.
- ``StopOnNonFiniteLoss``: fails the run at the first NaN or infinite training loss.
- ``InjectFault``: a test hook that signals, kills or raises at a chosen step.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.exceptions import SIGTERMException

from pelab.errors import ConfigError
from pelab.metrics import selection_score
from pelab.models.stacked import load_member, member_state
from pelab.reliability import requeue
from pelab.reliability.checkpoints import (
    IDENTITY_KEY,
    SCORES_KEY,
    AtomicCheckpointIO,
    differences,
    read_checkpoint,
)

log = logging.getLogger(__name__)


class BestCheckpoints(Callback):
    """Each member's ``best.ckpt``: its weights at its best validation by
    ``pelab.metrics.selection_score`` (ties keep the earlier), written as a single run's
    checkpoint (unstacked weights, ``pelab.models.stacked.member_state``, each in a storage of
    its own: ``own_storage``) with its identity, its last validation scores and the per-member
    state of every callback that has one (``member_state(k)``, e.g. the criterion of
    ``LearnedStop``): what ``eval.py``, ``load_run`` and the final test read. ``paths[k]``:
    member ``k``'s file; ``identities[k]``: its ``checkpoints.identity``.

    Portable: its state (each member's best score and file) survives a new directory; a run
    resumed from a checkpoint written elsewhere (``ckpt_path=<another run's last.ckpt>``, a
    moved or copied run directory) brings each member's best file along (copied unless already
    there, replacing any other), so the test reports the model the uninterrupted run would."""

    def __init__(self, paths: list[Path], identities: list[dict[str, Any]]) -> None:
        self.paths, self.identities = [Path(p) for p in paths], identities
        self.best: list[float | None] = [None] * len(self.paths)

    @property
    def state_key(self) -> str:
        return "pelab_best_checkpoints"

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "paths": [str(p) for p in self.paths]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.best = list(state_dict["best"])
        for before, here in zip(map(Path, state_dict["paths"]), self.paths, strict=True):
            if before != here and before.is_file():  # over a stale file of another run here
                here.parent.mkdir(parents=True, exist_ok=True)
                tmp = here.with_name(f".{here.name}.{os.getpid()}.tmp")
                shutil.copyfile(before, tmp)
                os.replace(tmp, here)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        task = pl_module.task
        for k in pl_module.validated:
            scores = pl_module.member_scores[k]["val"]
            score = selection_score(scores, task.in_distribution, task.n_val)
            if self.best[k] is None or score > self.best[k]:
                self.best[k] = score
                self.save(trainer, pl_module, k)

    def save(self, trainer: L.Trainer, pl_module: L.LightningModule, k: int) -> None:
        callbacks: dict[str, Any] = {IDENTITY_KEY: {"identity": self.identities[k]}}
        for callback in trainer.callbacks:
            if hasattr(callback, "member_state"):
                callbacks[callback.state_key] = callback.member_state(k)
        checkpoint = {
            "epoch": trainer.current_epoch,
            "global_step": trainer.global_step,
            "pytorch-lightning_version": L.__version__,
            "state_dict": {
                f"net.{key}": own_storage(v) for key, v in member_state(pl_module.net, k).items()
            },
            "callbacks": callbacks,
            SCORES_KEY: {"val": pl_module.member_scores[k]["val"]},
        }
        AtomicCheckpointIO().save_checkpoint(checkpoint, self.paths[k])

    def load_best(self, pl_module: L.LightningModule) -> list[Tested]:
        """Each member of ``pl_module`` takes the weights of its best checkpoint (a member
        with none keeps its own, ``Tested(None, None)``); returns what each member holds."""
        tested = []
        for k, path in enumerate(self.paths):
            if not path.is_file():
                tested.append(Tested(None, None))
                continue
            checkpoint = read_checkpoint(path)
            saved = (checkpoint.get("callbacks", {}).get(IDENTITY_KEY) or {}).get("identity")
            changed = differences(saved, self.identities[k]) if saved is not None else []
            if changed:  # a file of another run left here: never score it as this one's
                raise ConfigError(
                    f"{path} comes from a run with other settings, not from this run's "
                    "training (left in its directory by an earlier run?): remove it, or train "
                    "in another output directory:\n  " + "\n  ".join(changed)
                )
            state = {key[4:]: v for key, v in checkpoint["state_dict"].items()}
            load_member(pl_module.net, k, state)
            tested.append(Tested(str(path), checkpoint.get("global_step")))
        return tested


@dataclass(frozen=True)
class Tested:
    """The weights a member's test scores come from: its checkpoint file and that file's
    training step (``None``, ``None``: the weights at the end of training, no file)."""

    checkpoint: str | None
    step: int | None


def own_storage(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in a storage of its own: ``torch.save`` writes a view's whole storage, so
    member ``k``'s slice of a stack's ``[K, ...]`` weights is copied (else its checkpoint would
    hold all K members); a tensor that fills its storage (a K = 1 run's) is kept as it is."""
    return tensor.clone() if tensor.untyped_storage().nbytes() > tensor.nbytes else tensor


class ValidateLastStep(Callback):
    """Validates the last step of training when ``trainer.val_check_interval`` does not divide
    ``trainer.max_steps`` (e.g. 150 steps with validation every 200): otherwise such a run ends
    with no validation, no ``best.ckpt`` and nothing to test or resume, and a longer one loses
    its last steps. Asking the trainer to stop at that step makes Lightning validate it
    (``Trainer.should_stop`` allows a validation at once, as early stopping does)."""

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any, **kwargs: Any
    ) -> None:
        interval = trainer.val_check_batch
        last = trainer.max_steps > 0 and trainer.global_step >= trainer.max_steps
        if last and isinstance(interval, int) and trainer.global_step % interval:
            trainer.should_stop = True


class TrainingDiverged(RuntimeError):
    """The training loss became NaN or infinite."""


class ResumeState(Callback):
    """Saves ``identity`` and the RNG states (torch's CPU generator, the run's own GPU's, Python's
    ``random``) in each checkpoint; after a resume, puts them back just before the first training
    step, where the uninterrupted run had them when it saved (anything drawn in between, e.g. by
    creating data loader iterators, is thus undone). Only the run's GPU is read and set, so a
    job never opens a context on the other GPUs of its node, and a checkpoint resumes on a
    machine with another GPU count (its generator goes to the GPU the resumed run uses)."""

    def __init__(self, identity: dict[str, Any]) -> None:
        self.identity = identity
        self._pending: dict[str, Any] | None = None
        self.device: torch.device | None = None  # the run's, from the start of the fit

    @property
    def state_key(self) -> str:
        return IDENTITY_KEY

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.device = pl_module.device

    def state_dict(self) -> dict[str, Any]:
        rng = {"torch": torch.get_rng_state(), "python": random.getstate()}
        if self.device is not None and self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        return {"identity": self.identity, "rng": rng}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = state_dict.get("rng")

    def on_train_batch_start(self, trainer: L.Trainer, pl_module, *args: Any) -> None:
        if self._pending is None:
            return
        rng, self._pending = self._pending, None
        torch.set_rng_state(rng["torch"])
        random.setstate(rng["python"])
        state, device = rng.get("cuda"), pl_module.device
        if isinstance(state, list):  # written by pelab before 2026-11-27: every GPU's
            state = state[device.index or 0] if len(state) > (device.index or 0) else None
        if state is not None and device.type == "cuda":
            torch.cuda.set_rng_state(state, device)


def validation_due(trainer: L.Trainer, batch_idx: int) -> bool:
    """Whether Lightning validates after training batch ``batch_idx`` (step-based intervals)."""
    interval = trainer.val_check_batch
    last = batch_idx + 1 >= trainer.num_training_batches
    return last or (interval not in (None, float("inf")) and (batch_idx + 1) % interval == 0)


class CheckpointOnSigterm(Callback):
    """Saves ``<dirpath>/last.ckpt`` at the end of the step during which SIGTERM arrived; Lightning
    then stops the run (``SIGTERMException``) and a re-run in the same directory resumes there.

    One exception: when a validation is due after that step, Lightning would skip it on resume
    (it treats a checkpoint saved at a step's end as past that step's validation), so the
    checkpoint of the previous validation is kept instead: the resumed run repeats those steps
    and still ends with the uninterrupted run's numbers.

    During a validation or the test, Lightning only notes SIGTERM (its loops look at it between
    training steps), so a long evaluation would run on; there SIGTERM stops the run at once
    (nothing is lost: the run resumes from its last checkpoint and evaluates again).
    """

    def __init__(self, dirpath: str | Path, filename: str = "last.ckpt") -> None:
        self.path = Path(dirpath) / filename
        self._outside: Any = None  # the SIGTERM handler outside an evaluation
        self._lightning: Any = None  # Lightning's SIGTERM handler, called once the step is saved
        self._noted = False

    def on_train_start(self, trainer: L.Trainer, pl_module) -> None:
        """Take SIGTERM over from Lightning for training: Lightning stops right after the step
        during which its handler ran, so a signal landing after this callback's step end (and
        before Lightning's check) would stop the run without a checkpoint. Here the signal is
        only noted, and Lightning's handler runs once the step's checkpoint is saved."""
        if threading.current_thread() is threading.main_thread():
            self._lightning = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, self._note)

    def _note(self, signum: int, frame: Any) -> None:
        self._noted = True

    def on_validation_start(self, trainer: L.Trainer, pl_module) -> None:
        self._stop_at_once()

    def on_validation_end(self, trainer: L.Trainer, pl_module) -> None:
        self._restore()

    def on_test_start(self, trainer: L.Trainer, pl_module) -> None:
        self._stop_at_once()

    def on_test_end(self, trainer: L.Trainer, pl_module) -> None:
        self._restore()

    def on_exception(self, trainer: L.Trainer, pl_module, exception: BaseException) -> None:
        self._restore()

    def _stop_at_once(self) -> None:
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
        if not (self._noted or trainer.received_sigterm):
            return
        if validation_due(trainer, batch_idx):
            log.warning(
                "SIGTERM at step %d, where a validation is due: keeping %s from the previous "
                "validation (resuming from this step would skip the validation)",
                trainer.global_step,
                self.path,
            )
        else:
            trainer.save_checkpoint(self.path)
            log.warning("SIGTERM: saved %s at step %d", self.path, trainer.global_step)
        self._noted = False
        if callable(self._lightning):
            self._lightning(signal.SIGTERM, None)  # Lightning stops after this step
        else:
            raise SIGTERMException


class RequeueAtStepEnd(Callback):
    """SLURM's requeue signal (``SIGUSR1``, sent ``--signal=USR1@90`` seconds before the time
    limit) during training, answered at the end of a step: ``<dirpath>/last.ckpt`` is saved
    there, then the job requeues and ends (``pelab.reliability.requeue.handle``), and the
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


class StopOnNonFiniteLoss(Callback):
    """Raises ``TrainingDiverged`` naming the first step whose training loss was NaN or infinite,
    so a diverging run fails with a clear message instead of training on NaN for hours.

    Reading the loss on the host at every step would make a GPU wait for each step to finish
    (``pelab.reliability.syncs``). Each step instead marks, on the loss's device, the first step
    whose loss was not finite, and the mark is read where the host waits anyway: at a logging
    step (every ``trainer.log_every_n_steps``), before a validation or a checkpoint (so neither
    sees diverged weights) and at the end of training."""

    def __init__(self) -> None:
        self.first: torch.Tensor | None = None  # the first non-finite step, -1 while none
        self.loss: torch.Tensor | None = None  # its loss

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if loss is None:
            return
        loss = loss.detach()
        if self.first is None:
            self.first = torch.full((), -1, dtype=torch.long, device=loss.device)
            self.loss = torch.zeros((), dtype=loss.dtype, device=loss.device)
        newly = ~torch.isfinite(loss).all() & (self.first < 0)
        self.first = torch.where(newly, trainer.global_step, self.first)
        self.loss = torch.where(newly, loss.sum(), self.loss)
        if pl_module.logging_step(trainer.global_step - 1):
            self.check(trainer)

    def on_validation_start(self, trainer: L.Trainer, pl_module) -> None:
        self.check(trainer)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module, checkpoint: dict) -> None:
        self.check(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module) -> None:
        self.check(trainer)

    def check(self, trainer: L.Trainer) -> None:
        """``TrainingDiverged`` if a step's loss was not finite (reads the mark on the host)."""
        if self.first is None or int(self.first) < 0:
            return
        lr = trainer.optimizers[0].param_groups[0]["lr"] if trainer.optimizers else float("nan")
        raise TrainingDiverged(
            f"training diverged: train/loss is {float(self.loss)} at step {int(self.first)} "
            f"(learning rate {lr:.3g}, now at step {trainer.global_step}); lower "
            f"model.optimizer.lr, lengthen model.schedule.warmup_steps or keep "
            f"trainer.gradient_clip_val"
        )


@contextmanager
def exit_status_on_sigterm() -> Iterator[None]:
    """Lightning stops a run on SIGTERM with ``SIGTERMException``, a ``SystemExit`` whose status 0
    would tell a scheduler the job succeeded; exit with 143 (128 + SIGTERM) instead, as a process
    killed by SIGTERM does."""
    try:
        yield
    except SIGTERMException as error:
        raise SystemExit(128 + signal.SIGTERM) from error


FAULTS = ("sigterm", "sigkill", "sigint", "sigusr1", "raise", "pause", "mark")


class InjectFault(Callback):
    """Test hook: before training step ``at_step`` (after ``at_step`` optimizer steps), or test
    batch ``at_step`` with ``during=test``, send this process SIGTERM / SIGKILL / SIGINT /
    SIGUSR1, raise ``RuntimeError``, pause (sleep until killed, or ``seconds``), or only mark
    the moment (``mark``: create ``marker`` and go on). Enabled only by a config override, e.g.
    ``+callbacks.fault._target_=pelab.reliability.callbacks.InjectFault
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
        if self.seed is not None and self.seed not in pl_module.seeds:
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
