"""Hydra's submitit launchers (``hydra/launcher=slurm``, ``local``) with what a cluster needs
(issue 29):

- the resources follow the run (``slurm_sizing``; ``pelab.reliability.cluster.slurm``: no GPU
  for a CPU trainer, CPUs from the threads the run uses, memory from a measured peak) for each of
  ``gpus_per_node``, ``cpus_per_task`` and ``mem_gb`` left ``null``; a job its partition can
  never start is refused before submission, with the limit it exceeds (``slurm.unfit``);
- the launching process waits for every job; one that ends without a result (``scancel``,
  SIGTERM, a time limit, an out-of-memory kill: submitit's ``UncompletedJobError``) is recorded
  ``interrupted`` in its ``results.json`` with the command that resumes it (``unrecorded``), and
  the sweep goes on to its usual summary instead of a traceback;
- a local sweep's GPU jobs each see one of the machine's GPUs (``gpu_placement.local_gpus``);
- each job handles SLURM's requeue signal from its first line
(``pelab.reliability.cluster.requeue``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import (
    BaseSubmititLauncher,
)
from omegaconf import OmegaConf

from hydra_plugins.pelab_launcher.job_lines import SweepClock, launched_script, outcome
from hydra_plugins.pelab_launcher.unrecorded import mark_interrupted
from pelab.utils.console import duration

log = logging.getLogger(__name__)

RUNNING = ("RUNNING", "COMPLETING")  # the SLURM states of a job that has started


class _PelabSubmitit(BaseSubmititLauncher):
    _RESULT_WAIT_S: int | None = None  # None: submitit's wait for a finished job's result
    _POLL_S = 5.0  # how often the launching process looks at its jobs (submitit asks SLURM less)

    devices: dict[int, str] | None = None  # a local sweep's: each job's CUDA_VISIBLE_DEVICES

    def __call__(self, *args: Any, **kwargs: Any) -> JobReturn:
        from pelab.reliability.cluster import requeue

        requeue.install()  # the job's first line: SIGUSR1 requeues (or is ignored) from here on
        job_num = args[2] if len(args) > 2 else kwargs["job_num"]
        if self.devices is not None and job_num in self.devices:  # before CUDA starts
            os.environ["CUDA_VISIBLE_DEVICES"] = self.devices[job_num]
        return super().__call__(*args, **kwargs)

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        import submitit

        assert self.config is not None and self.hydra_context is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        nums = [initial_job_idx + i for i in range(len(job_overrides))]
        job_dirs = [self._job_dir(list(o), n) for o, n in zip(job_overrides, nums, strict=True)]
        skipped = not_submitted(job_overrides, nums, job_dirs)  # their directory's run still runs
        if skipped:
            keep = [i for i in range(len(nums)) if i not in skipped]
            if keep:
                done = self.launch([job_overrides[i] for i in keep], initial_job_idx)
                returned = dict(zip(keep, done, strict=True))
            else:
                returned = {}
            return [returned.get(i) or skipped[i] for i in range(len(nums))]
        params = self.resources(job_overrides, nums, job_dirs)
        init_keys = {"submitit_folder", "max_num_timeout"}
        executor = submitit.AutoExecutor(
            cluster=self._EXECUTOR,
            folder=params["submitit_folder"],
            **(
                {f"{self._EXECUTOR}_max_num_timeout": params["max_num_timeout"]}
                if "max_num_timeout" in params
                else {}
            ),
        )
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(
            **{
                k if k in base else f"{self._EXECUTOR}_{k}": v
                for k, v in params.items()
                if k not in init_keys
            }
        )
        log.info("Submitit '%s' sweep output dir: %s", self._EXECUTOR, sweep_dir)
        calls = []
        for num, overrides in zip(nums, job_overrides, strict=True):
            log.info("\t#%d : %s", num, " ".join(filter_overrides(overrides)))
            state = Singleton.get_state()
            calls.append((list(overrides), "hydra.sweep.dir", num, f"job_id_for_{num}", state))
        try:
            jobs = self.submit(executor, calls)
        except submitit.core.utils.FailedJobError as error:  # sbatch refused the array
            from pelab.errors import ConfigError

            said = " ".join(str(error).split())
            raise ConfigError(
                f"sbatch refused the jobs of this sweep: {said} (hydra.launcher.<option> "
                "sets what they ask; docs/reliability.md, 'SLURM')"
            ) from error
        if self._RESULT_WAIT_S is not None:
            for job in jobs:  # submitit's own attribute: how long a finished job's pickle may lag
                job._results_timeout_s = self._RESULT_WAIT_S
        resume = self.resume_command(sweep_dir)
        return wait_all(jobs, job_overrides, job_dirs, resume, self._POLL_S)

    def submit(self, executor: Any, calls: list[tuple]) -> list[Any]:
        """The sweep's jobs, as one array."""
        return executor.map_array(self, *zip(*calls, strict=True))

    def _job_dir(self, overrides: list[str], num: int) -> Path:
        from hydra_plugins.pelab_launcher.job_config import job_config, job_dir

        assert self.config is not None and self.hydra_context is not None
        return job_dir(job_config(self.hydra_context, self.config, overrides, num))

    def resources(
        self, job_overrides: Sequence[Sequence[str]], nums: list[int], job_dirs: list[Path]
    ) -> dict[str, Any]:
        """The launcher's parameters with ``null`` resources filled in (local: as given)."""
        return dict(self.params)

    def resume_command(self, sweep_dir: Path) -> str:
        """The command that re-runs this sweep into ``sweep_dir`` (``record``'s)."""
        from pelab.resume_commands import sweep_overrides, sweep_resume_command

        assert self.config is not None
        return sweep_resume_command(launched_script(), *sweep_overrides(self.config), sweep_dir)


def not_submitted(
    job_overrides: Sequence[Sequence[str]], nums: list[int], job_dirs: list[Path]
) -> dict[int, JobReturn]:
    """The jobs whose run directory another run holds (``pelab.reliability.resume.lock``: a sweep
    re-run while its jobs still run): not submitted twice, each logged with the holder and
    returned as accounted for (the summary shows its record, still ``running``)."""
    from pelab.reliability.resume.lock import busy

    skipped = {}
    for i, (overrides, num, job_dir) in enumerate(zip(job_overrides, nums, job_dirs, strict=True)):
        holder = busy(job_dir)
        if holder is None:
            continue
        log.warning(
            "#%d not submitted: %s is in use by another run: %s (one run writes a directory at "
            "a time; run the sweep again once it ended)",
            num,
            job_dir,
            holder,
        )
        returned = JobReturn(overrides=list(overrides), working_dir=str(job_dir))
        returned.status = JobStatus.COMPLETED
        returned.return_value = None
        skipped[i] = returned
    return skipped


def wait_all(
    jobs: Sequence[Any],
    job_overrides: Sequence[Sequence[str]],
    job_dirs: Sequence[Path],
    resume: str,
    poll_s: float = 0.0,
) -> list[JobReturn]:
    """Wait for every job, each polled every ``poll_s`` seconds, with a line as it starts and
    as it ends (``job_lines``: how, learned or not, its wall time, the sweep's ETA); one that
    ended without a result is recorded (``mark_interrupted``) and returned as accounted for, so
    the sweep summary reports it."""
    clock = SweepClock(len(jobs))
    started: dict[int, float] = {}
    returns: dict[int, JobReturn] = {}
    while len(returns) < len(jobs):
        for i, job in enumerate(jobs):
            if i in returns:
                continue
            done = job.done()
            if i not in started and (done or job.state in RUNNING):
                started[i] = time.monotonic()
                log.info("%s started (job %s)", job_dirs[i].name, job.job_id)
            if done:
                returns[i] = job_return(job, job_overrides[i], job_dirs[i], resume)
                said, failed = outcome(job_dirs[i])
                wall = duration(time.monotonic() - started[i])
                running = [t for k, t in started.items() if k not in returns]
                ended = clock.end(failed, started[i], running, max(len(running) + 1, 1))
                log.info("%s %s after %s; %s", job_dirs[i].name, said, wall, ended)
        if len(returns) < len(jobs):
            time.sleep(poll_s)
    return [returns[i] for i in range(len(jobs))]


def job_return(job: Any, overrides: Sequence[str], job_dir: Path, resume: str) -> JobReturn:
    """A finished job's ``JobReturn``; one that ended without a result (``UncompletedJobError``,
    ``FailedJobError``, a lost pickle) is recorded in its ``results.json`` and accounted for."""
    try:
        return job.results()[0]
    except Exception as error:
        kind = type(error).__name__
        first = str(error).strip().splitlines()[0] if str(error).strip() else kind
        interrupted = kind == "UncompletedJobError"
        state = getattr(job, "state", None) if interrupted else None
        reason = (
            f"job {job.job_id} ended without a result (state {state})"
            if interrupted
            else f"job {job.job_id} failed: {first}"
        )
    where = getattr(getattr(job, "paths", None), "stderr", None)
    marked = mark_interrupted(job_dir, reason, resume, where, interrupted)
    log.error(
        "%s; %s. Resume: %s",
        reason,
        "recorded in " + ", ".join(map(str, marked)) if marked else "it left no record",
        resume,
    )
    returned = JobReturn(overrides=list(overrides), working_dir=str(job_dir))
    returned.status = JobStatus.COMPLETED  # accounted for: the summary reports it
    returned.return_value = None
    return returned


class LocalLauncher(_PelabSubmitit):
    _EXECUTOR = "local"
    # a local job writes its result on this machine's disk before it exits: a job that ended
    # without one (killed) is reported after a second, not after submitit's 15 s for a cluster's
    # shared filesystem to catch up
    _RESULT_WAIT_S = 1
    _POLL_S = 0.5  # its jobs are this machine's processes

    def submit(self, executor: Any, calls: list[tuple]) -> list[Any]:
        """A job that trains on a GPU sees one of this machine's GPUs, spread over them by free
        memory (``gpu_placement.local_gpus``; submitit alone hides every GPU, or shows all jobs
        the first), set by the job itself before CUDA starts (``devices``, read in
        ``__call__``); a CPU job sees none."""
        from hydra_plugins.pelab_launcher.gpu_placement import local_gpus, wants_gpu
        from hydra_plugins.pelab_launcher.job_config import job_config

        assert self.config is not None and self.hydra_context is not None
        on_gpu = [
            wants_gpu(job_config(self.hydra_context, self.config, call[0], call[2]))
            for call in calls
        ]
        placed = local_gpus(on_gpu)
        self.devices = {
            call[2]: "" if device is None else device
            for call, device in zip(calls, placed, strict=True)
        }
        executor.update_parameters(gpus_per_node=int(any(on_gpu)))
        return super().submit(executor, calls)


class SlurmLauncher(_PelabSubmitit):
    _EXECUTOR = "slurm"

    def resources(
        self, job_overrides: Sequence[Sequence[str]], nums: list[int], job_dirs: list[Path]
    ) -> dict[str, Any]:
        """``null`` resources from the runs (the largest over the array's jobs), checked
        against the partition's limits (a ``ConfigError`` naming each exceeded one)."""
        from hydra_plugins.pelab_launcher.job_config import job_config
        from hydra_plugins.pelab_launcher.slurm_sizing import slurm_params

        assert self.config is not None and self.hydra_context is not None
        jobs = (  # composed only when a resource is null
            (job_config(self.hydra_context, self.config, list(overrides), num), job_dir)
            for overrides, num, job_dir in zip(job_overrides, nums, job_dirs, strict=True)
        )
        return slurm_params(self.params, jobs)
