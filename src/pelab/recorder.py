"""The life of a job's records, one ``results.json`` (``pelab.record``) per run, in one place for
training (K >= 1 members, ``TrainingRecorder``) and re-evaluation (one run, ``Recorder``):

    with Recorder(...) as recorder:
        checks()  # a refusal (``hydra_job.refused``) leaves no record
        recorder.started()  # each record says ``running``
        work()
        records = recorder.completed(outcome)  # each ``completed`` with ``outcome(index)``

An error out of the block ends each open record ``failed`` or ``interrupted`` (``ended_status``),
with the error (an interruption: and the command that resumes it), and goes on. Each record, as it
ends, closes its W&B run with its outcome (``pelab.wandb_finish``) and, completed, prints its
per-length table. Records end one after the other: a buffered member opens its own W&B run in
``outcome`` and closes it here."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from pelab.hydra_job import choices, interrupted_resume, refused
from pelab.members import Job
from pelab.metrics import summary
from pelab.outcome import Outcome
from pelab.record import (
    COMPLETED,
    RESULTS,
    earlier_wall_times,
    ended_status,
    environment,
    failure_reason,
    interrupted,
    new_record,
    write_json_atomic,
)
from pelab.reliability.cluster.slurm import peak_rss_mb
from pelab.utils.report import print_results
from pelab.wandb_finish import finish_wandb

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Planned:
    """A record to be written: the run's directory, its ``choices`` and ``config`` and the fields
    its record holds from the start (a member's ``member_of``, an evaluation's ``checkpoint``)."""

    directory: Path
    choices: dict[str, Any]
    config: dict[str, Any]
    fields: dict[str, Any]

    @property
    def path(self) -> Path:
        return self.directory / RESULTS


class Recorder:
    """The records of ``planned`` runs of ``job_type``; their wall time counts from here.
    ``resume``: the command an interrupted run's record names (default: re-run in place)."""

    def __init__(self, job_type: str, planned: list[Planned], resume: str | None = None) -> None:
        self.job_type, self.planned, self.resume = job_type, planned, resume
        self.start = time.perf_counter()
        self.records: list[dict[str, Any]] = []  # once started
        self.earlier: list[list[float]] = []  # per record: the attempts a resume continues
        self.open: set[int] = set()
        self.final: dict[str, Any] = {}  # what each record holds at its end (``ending_fields``)
        self.said: BaseException | None = None  # the interruption said on the console

    def __enter__(self) -> Recorder:
        return self

    def started(self) -> None:
        """Each record says ``running`` (replacing an earlier attempt's): a job killed outright
        (SIGKILL, out of memory) keeps it, never a finished-looking file."""
        self.earlier = [earlier_wall_times(p.path) for p in self.planned]
        env = environment()
        self.records = [
            new_record(self.job_type, p.choices, p.config) | p.fields | env for p in self.planned
        ]
        for planned, record in zip(self.planned, self.records, strict=True):
            write_json_atomic(planned.path, record)
        self.open = set(range(len(self.planned)))

    def completed(self, outcome: Callable[[int], Outcome]) -> list[dict[str, Any]]:
        """Each record ``completed`` with ``outcome(index)``, in order; one whose outcome
        raises ends with that error, and the first such error goes on once all are written."""
        if not self.records:
            raise RuntimeError("Recorder.completed before started: there is no record to end")
        self.final = self.ending_fields()
        failure = None
        for index in sorted(self.open):
            try:
                done = outcome(index)
            except BaseException as error:
                failure = failure or error
                self.failed(index, error)
                continue
            self.records[index] |= completed_fields(done)
            self.close(index, done)
        if failure is not None:
            raise failure
        return self.records

    def __exit__(self, kind: type | None, error: BaseException | None, traceback: Any) -> None:
        if error is None or (self.records and not self.open):
            return
        if not self.records:
            if refused(error):  # refused before any work: the one-line error says it all
                return
            self.started()
        self.final = self.ending_fields()
        for index in sorted(self.open):
            self.failed(index, error)

    def failed(self, index: int, error: BaseException) -> None:
        """Record ``index`` ends ``failed`` or ``interrupted`` with ``error``; an interruption and
        its resume command are said on the console once (a stack's records all end with it)."""
        record = self.records[index]
        record.update(status=ended_status(error), error=failure_reason(error, self.resume))
        record.update(self.failure_fields(error))
        if interrupted(error) and error is not self.said:
            self.said = error
            log.warning("%s", record["error"])
        self.close(index)

    def failure_fields(self, error: BaseException) -> dict[str, Any]:
        """What a record ended by ``error`` holds beside its status and error."""
        return {}

    def ending_fields(self) -> dict[str, Any]:
        """What every record holds at its end, beside its wall time and the environment (taken
        once, as the records start to end)."""
        return {}

    def close(self, index: int, outcome: Outcome | None = None) -> None:
        """Write record ``index`` as it ended, close its W&B run and, completed, print it."""
        self.open.discard(index)
        record, path = self.records[index], self.planned[index].path
        part = round(time.perf_counter() - self.start, 2)
        record |= self.final | {"wall_time_s": part}
        earlier = self.earlier[index]
        if earlier and record.get("resumed_from"):  # a resumed run: the total of its attempts
            record["wall_time_parts_s"] = [*earlier, part]
            record["wall_time_s"] = round(sum(record["wall_time_parts_s"]), 2)
        record |= environment()
        try:
            write_json_atomic(path, record)
            log.info("results written to %s", path)
        finally:
            finish_wandb(record, path)
        if outcome is not None:  # the console's last lines: after W&B's
            try:
                print_results(record, outcome.task)
            except Exception:  # the record is written: a table's fault must not fail the run
                log.exception("could not print the results table (results.json has them)")


class TrainingRecorder(Recorder):
    """The records of a training job's members, from the job's start. A stack's records name
    it (``member_of``) with the members' shared training time (``fit_time_s``); each holds this
    process's peak memory (``peak_rss_mb``: what its next SLURM job asks,
    ``pelab.reliability.cluster.slurm``) and, ended by an error, its ``stop_reason``."""

    def __init__(self, job: Job) -> None:
        self.member_of = job.member_of()
        fields = {} if self.member_of is None else {"member_of": self.member_of}
        planned = [
            Planned(m.directory, choices(m.config), config(m.config), fields) for m in job.members
        ]
        super().__init__("train", planned, interrupted_resume("train", job.directory))

    def failure_fields(self, error: BaseException) -> dict[str, Any]:
        return {"stop_reason": ended_status(error)}

    def ending_fields(self) -> dict[str, Any]:
        fields = {"peak_rss_mb": peak_rss_mb()}
        if self.member_of is not None:  # the members' shared training time
            fit_time = round(time.perf_counter() - self.start, 1)
            fields["member_of"] = self.member_of | {"fit_time_s": fit_time}
        return fields


def completed_fields(outcome: Outcome) -> dict[str, Any]:
    """A completed record's fields from its run's ``outcome``."""
    task = outcome.task
    fields = {
        "status": COMPLETED,
        "metrics": summary(outcome.scores, task.in_distribution, outcome.chance),
        "train_lengths": list(task.train_lengths),
        "params": outcome.params,
        "model_dims": outcome.model_dims,
    }
    fields |= outcome.competence or {}
    if outcome.checkpoint is not None:
        fields |= {"checkpoint": outcome.checkpoint, "checkpoint_step": outcome.checkpoint_step}
    if outcome.attention is not None:
        fields["attention"] = outcome.attention
    if outcome.time_split is not None:
        fields["time_split_s"] = outcome.time_split
    if outcome.resumed_from is not None:
        fields["resumed_from"] = outcome.resumed_from
        fields["resumed_from_step"] = outcome.resumed_from_step
    if outcome.warnings:
        fields["warnings"] = outcome.warnings
    return fields


def config(cfg: Any) -> dict[str, Any]:
    """A run's config as its record holds it: resolved, plain containers."""
    return OmegaConf.to_container(cfg, resolve=True)
