"""Competence budgets: train until the task is learned in distribution, with ``trainer.max_steps``
as the cap, instead of for a fixed number of steps.

With ``learned_at`` set (e.g. ``0.99``), validation is cheap and frequent: it runs on the
in-distribution evaluation lengths only (``validation_lengths``), every
``trainer.val_check_interval`` steps. The run counts as *learned* once the exact match at its
worst in-distribution length reaches ``learned_at`` at ``learned_patience`` consecutive
validations; training then stops. The out-of-distribution lengths are tested at the end, on the
checkpoint that in-distribution validation selected (``best.ckpt``), never during training.

The run record gets ``learned`` (``null`` without a criterion), ``steps_to_learn`` (the step of
the first of those consecutive validations: when the model first met the criterion for good;
``null`` when it never did) and ``stop_reason`` (``learned``, ``max_steps``, ``failed`` or
``interrupted``).
"""

from __future__ import annotations

import logging
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

from pelab.errors import ConfigError
from pelab.metrics import Scores
from pelab.tasks.base import Task
from pelab.utils.report import percent

log = logging.getLogger(__name__)


def validation_lengths(task: Task, learned_at: float | None) -> list[int]:
    """The lengths validation scores: the in-distribution ones under a competence budget, every
    evaluation length otherwise."""
    if learned_at is None:
        return list(task.eval_lengths)
    return [n for n in task.eval_lengths if task.in_distribution(n)]


def check_budget(learned_at: float | None, patience: int) -> None:
    """A ``ConfigError`` for a threshold or a patience no run can use."""
    if learned_at is not None and not 0.0 < learned_at <= 1.0:
        raise ConfigError(
            f"learned_at={learned_at} is not an exact-match threshold in (0, 1], e.g. 0.99 "
            "(null: train for trainer.max_steps)"
        )
    if patience < 1:
        raise ConfigError(f"learned_patience must be >= 1 validation, got {patience}")


class Competence:
    """The criterion of one model: fed its in-distribution validation scores after each
    validation (``update``), it says when the model has learned (see the module docstring).
    ``LearnedStop`` applies it to each member of a job."""

    def __init__(self, learned_at: float, patience: int = 2) -> None:
        check_budget(learned_at, patience)
        self.learned_at, self.patience = learned_at, patience
        self.streak, self.streak_start = 0, 0
        self.steps_to_learn: int | None = None

    def state_dict(self) -> dict[str, Any]:
        return {
            "streak": self.streak,
            "streak_start": self.streak_start,
            "steps_to_learn": self.steps_to_learn,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.streak, self.streak_start = state_dict["streak"], state_dict["streak_start"]
        self.steps_to_learn = state_dict["steps_to_learn"]

    @property
    def learned(self) -> bool:
        return self.steps_to_learn is not None

    def update(self, step: int, scores: Scores, task: Task) -> bool:
        """Count the validation at ``step`` with per-length ``scores``; True once learned."""
        if self.learned:
            return True
        worst = min(v["exact_match"] for n, v in scores.items() if task.in_distribution(n))
        if worst >= self.learned_at:
            if self.streak == 0:
                self.streak_start = step
            self.streak += 1
        else:
            self.streak = 0
        if self.streak >= self.patience:
            self.steps_to_learn = self.streak_start
            log.info(
                "learned at step %d on the validation set (exact match >= %s at every "
                "in-distribution length, %d validations in a row)",
                self.steps_to_learn,
                percent(self.learned_at),
                self.patience,
            )
        return self.learned

    def fields(self) -> dict[str, Any]:
        return {
            "learned": self.learned,
            "steps_to_learn": self.steps_to_learn,
            "stop_reason": "learned" if self.learned else "max_steps",
        }


class LearnedStop(Callback):
    """Stops each member of a job once it has learned its task (``Competence``, one per member:
    ``MemberState.stopped``); training ends when every member has stopped.

    Reads the validation scores as data (``SequenceModel.members[k].scores``). Its state (each
    member's streak and ``steps_to_learn``) is saved in every checkpoint, so a run killed after
    it learned resumes into the test, and one killed mid-streak counts on exactly.
    """

    def __init__(self, learned_at: float, patience: int = 2, members: int = 1) -> None:
        """``members``: the job's (``pelab.members.Job``)."""
        check_budget(learned_at, patience)
        self.competence = [Competence(learned_at, patience) for _ in range(members)]
        self.fitted: list[dict[str, Any]] | None = None  # the record fields when fitting ended

    @property
    def state_key(self) -> str:
        return "pelab_learned_stop"

    def state_dict(self) -> dict[str, Any]:
        return {"members": [c.state_dict() for c in self.competence]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for competence, state in zip(self.competence, state_dict["members"], strict=True):
            competence.load_state_dict(state)

    def member_state(self, k: int) -> dict[str, Any]:
        """Member ``k``'s criterion, as its own checkpoint (``best.ckpt``) holds it."""
        return {"members": [self.competence[k].state_dict()]}

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.fitted = [c.fields() for c in self.competence]

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        for k, competence in enumerate(self.competence):  # resumed once some had learned
            if competence.learned:
                pl_module.stop_member(k)
        if not pl_module.active:
            trainer.should_stop = True

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        for k in pl_module.active:
            scores = pl_module.members[k].scores["val"]
            if self.competence[k].update(trainer.global_step, scores, pl_module.task):
                pl_module.stop_member(k)
        if not pl_module.active:
            trainer.should_stop = True

    def fields(self, k: int = 0) -> dict[str, Any]:
        """Member ``k``'s competence fields for its record (never trained, ``train=false``:
        nothing learned here)."""
        return self.competence[k].fields() if self.fitted is None else self.fitted[k]


def competence_fields(stop: LearnedStop | None, k: int = 0) -> dict[str, Any]:
    """The record's competence fields of member ``k`` of a finished training job (``stop``: its
    callback, None without a criterion)."""
    if stop is None:
        return {"learned": None, "steps_to_learn": None, "stop_reason": "max_steps"}
    return stop.fields(k)
