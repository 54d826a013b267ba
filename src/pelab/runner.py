"""The one run executor: a training run (``pelab.train``) and a re-evaluation of a checkpoint
(``pelab.evaluate``) both go through ``execute``, so both leave the same ``results.json``
(``pelab.record``), print the same table, score chance levels on the same test sets
(``scored_outcome``) and close their W&B run with their outcome. Both build their trainer and
loggers the same way too (``pelab.trainer``); what Hydra tells a job about itself is
``pelab.hydra_job``."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pelab.chance import eval_chance
from pelab.hydra_job import interrupted_resume
from pelab.lit_module import SequenceModel
from pelab.metrics import Scores, summary
from pelab.record import (
    COMPLETED,
    RESULTS,
    ended_status,
    new_record,
    recorded,
)
from pelab.tasks.base import Task
from pelab.utils.report import print_results
from pelab.wandb_finish import finish_wandb

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """What a finished run hands to its record: the task, the scores of each split, the chance
    levels of the test sets, the model's sizes, and notes."""

    task: Task
    scores: dict[str, Scores]
    chance: Scores | None
    params: dict[str, int]
    model_dims: dict[str, Any]
    checkpoint: str | None = None  # training: the file its test scores come from
    checkpoint_step: int | None = None  # and that file's training step
    resumed_from: str | None = None
    resumed_from_step: int | None = None
    warnings: list[str] = field(default_factory=list)
    competence: dict[str, Any] | None = None  # training: pelab.competence.competence_fields
    attention: dict[str, str] | None = None  # the kernel and dtype it ran (pelab.kernels)


def execute(
    job_type: str,
    output_dir: str | Path,
    choices: dict[str, Any],
    config: dict[str, Any],
    work: Callable[[], Outcome],
    since: float | None = None,
    earlier: list[float] | None = None,
    job_dir: str | Path | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Run ``work`` inside its record: ``results.json`` in ``output_dir`` is written on entry
    (``running``), and on exit ``completed`` with the outcome or ``failed`` with the error (which
    is re-raised); the per-length table is printed and the W&B run is closed either way.
    ``since``: the ``time.perf_counter()`` the record's ``wall_time_s`` counts from (default:
    now; a member of a run counts from the run's start); ``earlier``: the wall times of the
    attempts a resumed training run continues (``record.earlier_wall_times``); ``job_dir``: the
    directory of the job a member's run belongs to (default: ``output_dir``). An interrupted
    training run records and logs the command that resumes it (``record.resume_command``)."""
    record = new_record(job_type, choices, config) | extra
    resume = None
    if job_type == "train":
        resume = interrupted_resume(job_type, job_dir or output_dir)
    try:
        with recorded(Path(output_dir) / RESULTS, record, since, resume, earlier):
            try:
                outcome = work()
            except BaseException as error:
                if job_type == "train":
                    record["stop_reason"] = ended_status(error)
                raise
            task = outcome.task
            record.update(
                status=COMPLETED,
                metrics=summary(outcome.scores, task.in_distribution, outcome.chance),
                train_lengths=list(task.train_lengths),
                params=outcome.params,
                model_dims=outcome.model_dims,
            )
            if outcome.competence is not None:
                record.update(outcome.competence)
            if outcome.checkpoint is not None:
                record["checkpoint"] = outcome.checkpoint
                record["checkpoint_step"] = outcome.checkpoint_step
            if outcome.attention is not None:
                record["attention"] = outcome.attention
            if outcome.resumed_from is not None:
                record["resumed_from"] = outcome.resumed_from
                record["resumed_from_step"] = outcome.resumed_from_step
            if outcome.warnings:
                record["warnings"] = outcome.warnings
        return record
    finally:
        finish_wandb(record, Path(output_dir) / RESULTS)
        if record["status"] == COMPLETED:  # the console's last lines: after W&B's
            try:
                print_results(record, outcome.task)
            except Exception:  # the record is written: a table's fault must not fail the run
                log.exception("could not print the results table (results.json has them)")


def scored_outcome(
    cfg: DictConfig, model: SequenceModel, member: int = 0, **notes: Any
) -> Outcome:
    """The outcome of ``member`` of a model whose test (``cfg.test``) has run: its scores, and
    the chance level of each metric on the very test sets it was scored on."""
    task = model.task
    chance = eval_chance(task, "test", task.n_test, cfg.paths.cache_dir) if cfg.test else None
    return Outcome(
        task=task,
        scores=dict(model.member_scores[member]),
        chance=chance,
        params=model.net.num_params(),
        model_dims=json.loads(json.dumps(asdict(model.net.dims))),  # as results.json holds it
        **notes,
    )
