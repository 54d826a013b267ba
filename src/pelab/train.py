"""Training entry point, one path for every job: a job is a stack of K >= 1 members
(``pelab.members.Job``; a plain run is K = 1) trained as one network (``pelab.lit_module``),
each member's run leaving its own ``results.json``.

``scripts/train.py`` -> ``main(cfg)`` -> ``train(job)`` -> ``fit_and_test(job, ...)`` ->
``trainer.fit``: ``main`` is a job of the script (``hydra_job.sweep_task``: in a sweep a failure
is recorded and the sweep goes on); ``train`` holds the job's directory, checks and builds its
members (``pelab.preflight.Preflight``), finds where their training starts
(``pelab.reliability.resume.start.Resume``), both before any record is written, and writes its
records around ``fit_and_test`` (``pelab.recorder``), which fits the members and tests each on
its best checkpoint, named in its record (``checkpoint``). *Train* is the verb over a job; a
*run* is what each member trains and records."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import lightning as L
from omegaconf import DictConfig

from pelab.assembly import data_module
from pelab.competence import LearnedStop, competence_fields
from pelab.hydra_job import sweep_task
from pelab.kernels import AttentionKernels
from pelab.lengths import no_extrapolation_note
from pelab.lit_module import SequenceModel
from pelab.members import Job, Member
from pelab.outcome import Outcome, scored_outcome
from pelab.phase_times import PhaseTimes
from pelab.preflight import Preflight
from pelab.recorder import TrainingRecorder
from pelab.reliability.cluster import requeue
from pelab.reliability.resume.callbacks import Tested
from pelab.reliability.resume.completed import completed_record
from pelab.reliability.resume.lock import run_lock
from pelab.reliability.resume.signals import exit_status_on_sigterm
from pelab.reliability.resume.start import Resume
from pelab.trainer import make_trainer, run_loggers

log = logging.getLogger(__name__)


@dataclass
class Fitted:
    """A trained (and tested) job: its members' model, where its training started, their
    criterion and notes."""

    model: SequenceModel
    resume: Resume
    stop: LearnedStop | None
    phases: PhaseTimes  # where this attempt's time went
    notes: list[str] = field(default_factory=list)
    tested: list[Tested] = field(default_factory=list)  # per member, once tested
    kernels: AttentionKernels = field(default_factory=AttentionKernels)


def fit_and_test(job: Job, preflight: Preflight, resume: Resume) -> Fitted:
    """Fit the members of ``preflight`` from ``resume``, then test each on every evaluation
    length with the weights of its best validation."""
    cfg, model = job.config, preflight.model
    stop = None
    if cfg.get("learned_at") is not None:
        stop = LearnedStop(cfg.learned_at, cfg.get("learned_patience", 2), len(job.members))
    fitted = Fitted(model, resume, stop, PhaseTimes(preflight.started))
    callbacks: list[L.Callback] = [*resume.callbacks, fitted.kernels, fitted.phases]
    callbacks += [stop] if stop is not None else []
    note = no_extrapolation_note(model.task.train_lengths, model.task.eval_lengths)
    if note and cfg.test:  # said before the hours of training, and kept in the record
        log.warning(note)
        fitted.notes.append(note)
    params = model.net.num_params()
    loggers = model.log_sink.trainer_loggers(lambda: run_loggers(cfg, params, fitted.notes))
    trainer = make_trainer(cfg, loggers, callbacks)
    data = data_module(cfg, model.task, job.seeds)
    with exit_status_on_sigterm():
        fitted.tested = resume.fit(trainer, model, data, train=cfg.train, test=cfg.test)
        if cfg.test:
            trainer.test(model, datamodule=data, verbose=False)
    return fitted


def member_outcome(fitted: Fitted, member: Member) -> Outcome:
    """``member``'s outcome, once its history (training, validation, test) is with its own
    loggers (``pelab.member_log``)."""
    model, cfg = fitted.model, member.config
    notes = list(fitted.notes)
    params = model.net.num_params()
    first = member.index == 0  # W&B's mode is said once per job
    model.log_sink.replay(member.index, lambda: run_loggers(cfg, params, notes, say_mode=first))
    tested = fitted.tested[member.index] if fitted.tested else None
    return scored_outcome(
        cfg,
        model,
        member=member.index,
        checkpoint=tested and tested.checkpoint,
        checkpoint_step=tested and tested.step,
        resumed_from=fitted.resume.resumed_from,
        resumed_from_step=fitted.resume.step,
        warnings=notes,
        competence=competence_fields(fitted.stop, member.index),
        attention=fitted.kernels.found,
        time_split=fitted.phases.split(),
    )


def train(job: Job | DictConfig) -> list[dict[str, Any]]:
    """``fit_and_test`` inside its members' run records (``pelab.recorder``), with the
    per-length table, and ``wandb.finish()`` so the next job of a multirun opens its own W&B run.
    Returns the records, one per member: a plain run's one, or a stack's (``seeds=[...]`` and/or
    ``learning_rates=[...]``), each in ``record.member_dir``, naming its stack in ``member_of``.
    A job whose directory already holds the completed records of the same config (up to the
    settings that change neither training nor test, ``record.RUN_ONLY``) returns them as they
    are, untrained and untested: with ``skip_completed=true``, and whenever it would resume
    (``resume=true``, the default: re-running a finished run's command)."""
    job = job if isinstance(job, Job) else Job.of(job)
    requeue.install()  # a run started from Python (scripts/train.py installed it already)
    requeue.started()
    cfg = job.config
    if cfg.get("skip_completed") or (cfg.get("resume") and cfg.get("ckpt_path") is None):
        done = [completed_record(m.config) for m in job.members]
        if all(r is not None for r in done):
            requeue.finished()
            if not cfg.get("skip_completed"):
                log.warning(
                    "%s already completed with this config: its record is left as it was (to "
                    "test other lengths, change task.eval_lengths or run scripts/eval.py; to "
                    "train again, use another hydra.run.dir)",
                    job.directory,
                )
            return done
    # one writer per job directory, for the job's life (a second process waits or is refused)
    with run_lock(job.directory, job.config.get("run_lock_wait_s") or 0):
        try:
            with TrainingRecorder(job) as recorder:
                preflight = Preflight.training(job)  # a refusal writes no record
                directories = [m.directory for m in job.members]
                identities = [m.identity for m in job.members]
                resume = Resume.chosen(cfg, preflight.model, directories, identities)
                recorder.started()
                fitted = fit_and_test(job, preflight, resume)
                return recorder.completed(lambda k: member_outcome(fitted, job.members[k]))
        finally:  # every record is written: SLURM's requeue signal is ignored from here on
            requeue.finished()


@sweep_task
def main(cfg: DictConfig) -> None:
    """One job of ``scripts/train.py``: ``train(Job.of(cfg))``."""
    train(Job.of(cfg))
