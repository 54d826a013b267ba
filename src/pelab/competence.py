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
``null`` when it never did) and ``stop_reason`` (``learned``, ``max_steps`` or ``failed``).
"""

from __future__ import annotations

import logging
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

from pelab.errors import ConfigError
from pelab.metrics import Scores
from pelab.tasks.base import Task

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
    ``LearnedStop`` applies it to a single run, ``pelab.members`` to each member of a stack."""

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
                "learned at step %d (exact match >= %g at every in-distribution length, %d "
                "validations in a row)",
                self.steps_to_learn,
                self.learned_at,
                self.patience,
            )
        return self.learned

    def outcome(self) -> dict[str, Any]:
        return {
            "learned": self.learned,
            "steps_to_learn": self.steps_to_learn,
            "stop_reason": "learned" if self.learned else "max_steps",
        }


class LearnedStop(Callback):
    """Stops a training run once the model has learned its task (``Competence``).

    Reads the validation scores as data (``SequenceModel.scores["val"]``). Its state (the current
    streak and ``steps_to_learn``) is saved in every checkpoint, so a run killed after it
    learned resumes into the test, and one killed mid-streak counts on exactly.
    """

    def __init__(self, learned_at: float, patience: int = 2) -> None:
        self.competence = Competence(learned_at, patience)
        self.fitted: dict[str, Any] | None = None  # the outcome when fitting ended

    @property
    def state_key(self) -> str:
        return "pelab_learned_stop"

    def state_dict(self) -> dict[str, Any]:
        return self.competence.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.competence.load_state_dict(state_dict)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # kept apart from the state: testing best.ckpt restores the state saved with it
        self.fitted = self.outcome()

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.competence.learned:  # resumed from a checkpoint saved once learned
            trainer.should_stop = True

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or self.competence.learned:
            return
        if self.competence.update(trainer.global_step, pl_module.scores["val"], pl_module.task):
            trainer.should_stop = True

    @property
    def steps_to_learn(self) -> int | None:
        return self.competence.steps_to_learn

    def outcome(self) -> dict[str, Any]:
        return self.competence.outcome()


def budget_outcome(stop: LearnedStop | None) -> dict[str, Any]:
    """The record's competence fields of a finished training run (``stop``: its callback, None
    without a criterion)."""
    if stop is None:
        return {"learned": None, "steps_to_learn": None, "stop_reason": "max_steps"}
    return stop.fitted or stop.outcome()
