"""Lightning callbacks that make a run safe to kill and cheap to resume exactly.

- ``ResumeState``: stores the run's identity (``checkpoints.identity``) and torch's RNG state in
  every checkpoint and restores the RNG before the first step after a resume (Lightning does not
  save the global RNG, which dropout draws from in training).
- ``BestCheckpoints``: each member's ``best.ckpt``, in a single run's format, exact when a
  run resumes from a checkpoint written in another directory.
- ``ValidateLastStep``: validates (and so checkpoints) the last step when the validation
  interval does not divide ``trainer.max_steps``: a short run always saves its model.
- ``StopOnNonFiniteLoss``: fails the run at the first NaN or infinite training loss.

The signals a run answers are ``pelab.reliability.resume.signals``'; the fault injector the tests
use is ``tests.reliability.faults``.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from pelab.errors import ConfigError
from pelab.logging_steps import logging_step
from pelab.metrics import selection_score
from pelab.models.stacked import load_member_weights, member_weights
from pelab.reliability.resume.checkpoints import (
    IDENTITY_KEY,
    SCORES_KEY,
    AtomicCheckpointIO,
    differences,
    read_checkpoint,
)

log = logging.getLogger(__name__)


@runtime_checkable
class PerMemberState(Protocol):
    """A callback whose checkpointed state is per member: member ``k``'s, as its own
    checkpoint (``best.ckpt``) holds it under ``state_key`` (``LearnedStop``)."""

    @property
    def state_key(self) -> str: ...

    def member_state(self, k: int) -> dict[str, Any]: ...


class BestCheckpoints(Callback):
    """Each member's ``best.ckpt``: its weights at its best validation by
    ``pelab.metrics.selection_score`` (ties keep the earlier), written as a single run's
    checkpoint (unstacked weights, ``pelab.models.stacked.member_weights``, each in a storage of
    its own: ``own_storage``) with its identity, its last validation scores and the per-member
    state of every callback that has one (``PerMemberState``, e.g. the criterion of
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
            scores = pl_module.members[k].scores["val"]
            score = selection_score(scores, task.in_distribution, task.n_val)
            if self.best[k] is None or score > self.best[k]:
                self.best[k] = score
                self.save(trainer, pl_module, k)

    def save(self, trainer: L.Trainer, pl_module: L.LightningModule, k: int) -> None:
        callbacks: dict[str, Any] = {IDENTITY_KEY: {"identity": self.identities[k]}}
        for callback in trainer.callbacks:
            if isinstance(callback, PerMemberState):
                callbacks[callback.state_key] = callback.member_state(k)
        checkpoint = {
            "epoch": trainer.current_epoch,
            "global_step": trainer.global_step,
            "pytorch-lightning_version": L.__version__,
            "state_dict": {
                f"net.{key}": own_storage(v) for key, v in member_weights(pl_module.net, k).items()
            },
            "callbacks": callbacks,
            SCORES_KEY: {"val": pl_module.members[k].scores["val"]},
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
            load_member_weights(pl_module.net, k, state)
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


class StopOnNonFiniteLoss(Callback):
    """Raises ``TrainingDiverged`` naming the first step whose training loss was NaN or infinite,
    so a diverging run fails with a clear message instead of training on NaN for hours.

    Reading the loss on the host at every step would make a GPU wait for each step to finish
    (``benchmarks.syncs``). Each step instead marks, on the loss's device, the
    first step whose loss was not finite, and the mark is read where the host waits anyway: at a
    logging step (every ``trainer.log_every_n_steps``), before a validation or a checkpoint (so
    neither sees diverged weights) and at the end of training."""

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
        if logging_step(trainer, trainer.global_step - 1):
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
