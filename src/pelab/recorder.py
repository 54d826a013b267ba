"""The records of a training job: one ``results.json`` per member (``pelab.record``), written
around the job's one ``train(job)``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from omegaconf import OmegaConf

from pelab.hydra_job import choices, refused
from pelab.members import Job, Member
from pelab.record import RESULTS, earlier_wall_times, new_record, write_json_atomic
from pelab.reliability.slurm import peak_rss_mb
from pelab.runner import Outcome, execute


class Recorder:
    """The K run records of ``job``, around its checks and its one training, from the job's
    start (its wall time counts from entry):

        with Recorder(job) as recorder:
            prepared = prepare(job)  # a refusal (``hydra_job.refused``) leaves no record
            recorder.started()  # each member's record says ``running``
            fitted = train(job, prepared)
            recorder.completed(outcome)  # each member's ``completed`` record, outcome(member)

    An error out of the block ends every member's record ``failed`` or ``interrupted`` with
    the error, which goes on. Members close one after the other: each closes its own W&B
    run."""

    def __init__(self, job: Job) -> None:
        self.job, self.start = job, time.perf_counter()
        self.member_of = job.member_of()
        self.earlier: list[list[float]] | None = None  # once started
        self.closed = False

    def __enter__(self) -> Recorder:
        return self

    def started(self) -> None:
        """Each member's ``running`` record, replacing an earlier attempt's."""
        # the times of the attempts a resume continues
        self.earlier = [earlier_wall_times(m.directory / RESULTS) for m in self.job.members]
        for member in self.job.members:
            record = new_record("train", choices(member.config), config(member))
            write_json_atomic(member.directory / RESULTS, record | self.extra())

    def __exit__(self, kind: type | None, error: BaseException | None, traceback: Any) -> None:
        if error is None or self.closed:
            return
        if self.earlier is None:
            if refused(error):  # refused before any work: the one-line error says it all
                return
            self.started()
        try:
            self.close(lambda member: _raise(error))
        except BaseException as recorded:
            if recorded is not error:
                raise

    def completed(self, outcome: Callable[[Member], Outcome]) -> list[dict[str, Any]]:
        """Each member's record from ``outcome(member)``; the first error, once all are
        written."""
        return self.close(outcome)

    def extra(self) -> dict[str, Any]:
        return {} if self.member_of is None else {"member_of": self.member_of}

    def close(self, outcome: Callable[[Member], Outcome]) -> list[dict[str, Any]]:
        self.closed = True
        if self.member_of is not None:  # the members' shared training time
            self.member_of["fit_time_s"] = round(time.perf_counter() - self.start, 1)
        # this process's peak memory: what its next SLURM job asks (pelab.reliability.slurm)
        extra = self.extra() | {"peak_rss_mb": peak_rss_mb()}
        records, failure = [], None
        for member in self.job.members:
            try:
                records.append(
                    execute(
                        "train",
                        member.directory,
                        choices(member.config),
                        config(member),
                        lambda member=member: outcome(member),
                        since=self.start,
                        earlier=self.earlier[member.index],
                        job_dir=self.job.directory,
                        **extra,
                    )
                )
            except BaseException as error:
                failure = failure or error
        if failure is not None:
            raise failure
        return records


def config(member: Member) -> dict[str, Any]:
    """The member's config as its record holds it."""
    return OmegaConf.to_container(member.config, resolve=True)


def _raise(error: BaseException) -> Outcome:
    raise error
