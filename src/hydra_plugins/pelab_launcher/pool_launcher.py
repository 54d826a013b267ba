"""A local sweep that behaves like a SLURM array: every job runs in its own process, at most
``n_jobs`` at a time (one per core by default, each with at most ``cores // n_jobs`` torch
threads: a job's ``threads=auto`` chooses within that share, ``pelab.threads``). Jobs that
train on a GPU fill every GPU of the node: ``n_jobs=-1`` runs on each device as many at once as
fit its free memory (``gpu_placement``, from each job's need measured on a GPU,
``pelab.sizing.job_need``); each job sees only its device (its own ``CUDA_VISIBLE_DEVICES``,
given to the device with the most room) and its allocator is held to its share of that device
(``torch.cuda.set_per_process_memory_fraction``), which its own memory check reads. A job that
is killed (SIGKILL, out of memory) or exits abnormally is recorded as failed in its
``results.json`` (its signal or exit status, the tail of its output: ``unrecorded``) and the
others run on; the sweep summary (``pelab.analysis.sweep.SweepSummary``) then names it and exits
with status 1.

Hydra's own local launchers cannot do this: ``basic`` runs the jobs in the sweep's process and
joblib's pool ends the launch when a worker dies (``TerminatedWorkerError``). Here each job is
one ``multiprocessing`` process forked from a fork server that has imported torch, Lightning and
pelab once (``PRELOAD``), so a job starts in milliseconds, not the ~6 s of those imports; it is
not a pool, so no job's death touches another. The launcher pickles (cloudpickle) what a job
needs, as Hydra's submitit launcher does, and the job runs it with Hydra's ``run_job`` (the same
job directory, overrides and ``.hydra/`` files as any launcher). Each job's console output goes
to ``<sweep dir>/.launcher/<job number>.log``."""

import logging
import multiprocessing
import signal
import time
from dataclasses import dataclass
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import cloudpickle
from hydra.core.config_store import ConfigStore
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from hydra_plugins.pelab_launcher import worker
from hydra_plugins.pelab_launcher.gpu_placement import (
    PRELOAD,
    Gpu,
    share_gpus,
    take_gpu,
    wants_gpu,
)
from hydra_plugins.pelab_launcher.job_config import job_config, job_dir
from hydra_plugins.pelab_launcher.job_lines import SweepClock, launched_script, outcome
from hydra_plugins.pelab_launcher.unrecorded import mark_failed
from pelab.errors import ConfigError
from pelab.threads import available_cores
from pelab.utils.console import count, duration

log = logging.getLogger(__name__)

LAUNCHER_DIR = ".launcher"  # inside the sweep directory: each job's pickled call and output
LOG_TAIL_LINES = 20
STOP_GRACE_S = 60.0  # after passing SIGTERM on, how long the running jobs get to checkpoint


@dataclass
class PoolLauncherConf:
    _target_: str = "hydra_plugins.pelab_launcher.pool_launcher.PoolLauncher"
    n_jobs: int = -1  # jobs at once; -1: one per available core
    threads_per_job: int | None = None  # each job's share of torch threads; None: cores // n_jobs


ConfigStore.instance().store(
    group="hydra/launcher", name="pool", node=PoolLauncherConf, provider="pelab"
)


@dataclass
class _Job:
    num: int
    overrides: list[str]
    config: DictConfig  # as the job will see it, Hydra's node included
    output_dir: Path  # the job's Hydra directory, where its results.json is
    log_path: Path
    call_path: Path
    result_path: Path
    process: Any = None  # a multiprocessing Process once started
    started: float = 0.0
    gpu: Gpu | None = None  # the GPU it runs on, once started


class PoolLauncher(Launcher):
    def __init__(self, n_jobs: int = -1, threads_per_job: int | None = None) -> None:
        if n_jobs == 0 or n_jobs < -1:
            raise ConfigError(
                f"hydra.launcher.n_jobs={n_jobs}: give a number of jobs at once >= 1, "
                "or -1 for one per core (on a GPU: as many as fit its memory)"
            )
        if threads_per_job is not None and threads_per_job < 1:
            raise ConfigError(
                f"hydra.launcher.threads_per_job={threads_per_job}: give >= 1, or null for "
                "cores // n_jobs"
            )
        self.requested, self.threads_per_job = n_jobs, threads_per_job
        self.set_jobs(available_cores() if n_jobs == -1 else n_jobs)
        self.gpus: list[Gpu] = []  # the GPUs the sweep's GPU jobs run on
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: list[list[str]], initial_job_idx: int) -> list[JobReturn]:
        """Run every job, ``n_jobs`` at a time, and return each job's ``JobReturn`` in order. A
        job that dies is returned as run (its failure is in its record and the sweep summary),
        so the sweep goes on to its summary. SIGTERM or Ctrl-C to the sweep is passed on to the
        running jobs (as SIGTERM: each checkpoints and records it); jobs not yet started are not
        started."""
        setup_globals()
        assert self.config is not None and self.hydra_context is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        (sweep_dir / LAUNCHER_DIR).mkdir(parents=True, exist_ok=True)
        jobs = [
            self._prepare(initial_job_idx + i, list(overrides), sweep_dir)
            for i, overrides in enumerate(job_overrides)
        ]
        self.share_gpu(jobs)
        log.info(
            "Launching %s, %d at a time, %d torch thread(s) each at most (threads=auto "
            "chooses within it); sweep output dir: %s",
            count(len(job_overrides), "job"),
            self.n_jobs,
            self.threads,
            sweep_dir,
        )
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        waiting, running, returns = list(jobs), [], {}
        clock: SweepClock | None = None
        previous_sigterm = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        try:
            while waiting or running:
                while waiting and len(running) < self.n_jobs:
                    running.append(self._start(waiting.pop(0), context))
                # timed from the first jobs' start: the fork server's start-up is paid once
                clock = clock or SweepClock(len(jobs))
                wait([job.process.sentinel for job in running])
                for job in [j for j in running if j.process.exitcode is not None]:
                    running.remove(job)
                    if job.gpu is not None:
                        job.gpu.running -= 1
                    returns[job.num] = self._finish(job, clock, running)
        except KeyboardInterrupt:
            _stop(running)
            self._say_interrupted(len(returns), len(running), len(waiting), sweep_dir)
            raise
        finally:
            signal.signal(signal.SIGTERM, previous_sigterm)
        return [returns[job.num] for job in jobs]

    def _say_interrupted(self, ended: int, stopped: int, waiting: int, sweep_dir: Path) -> None:
        """How far the sweep got, and the one command that resumes all of it."""
        from pelab.resume_commands import SWEEP_RESUMES, sweep_overrides, sweep_resume_command

        command = sweep_resume_command(launched_script(), *sweep_overrides(self.config), sweep_dir)
        log.error(
            "sweep interrupted: %s ended, %d stopped, %d not started. To resume the whole "
            "sweep (%s):\n  %s",
            count(ended, "job"),
            stopped,
            waiting,
            SWEEP_RESUMES,
            command,
        )

    def set_jobs(self, n_jobs: int) -> None:
        """``n_jobs`` at once, each with ``threads_per_job`` torch threads (None: its share)."""
        self.n_jobs = n_jobs
        self.threads = self.threads_per_job or max(1, available_cores() // n_jobs)

    def share_gpu(self, jobs: list["_Job"]) -> None:
        """When a job trains on a GPU, place the sweep on every GPU of the node (``share_gpus``):
        with ``n_jobs=-1``, on each device as many jobs at once as fit its free memory, at most
        one per core; with ``n_jobs=N``, N spread over the devices. Each job's allocator is held
        to its share of its device's free memory."""
        self.gpus = []
        self.set_jobs(available_cores() if self.requested == -1 else self.requested)
        on_gpu = [(job.config, job.output_dir) for job in jobs if wants_gpu(job.config)]
        if on_gpu:
            measured = self.requested == -1
            self.gpus = share_gpus(on_gpu, measured, self.n_jobs, available_cores(), len(jobs))
            self.set_jobs(sum(gpu.jobs for gpu in self.gpus))

    def _prepare(self, num: int, overrides: list[str], sweep_dir: Path) -> _Job:
        assert self.hydra_context is not None and self.config is not None
        sweep_config = job_config(self.hydra_context, self.config, overrides, num)
        log.info("\t#%d : %s", num, " ".join(filter_overrides(overrides)))
        files = sweep_dir / LAUNCHER_DIR
        job = _Job(
            num,
            overrides,
            sweep_config,
            job_dir(sweep_config),
            files / f"{num}.log",
            files / f"{num}.call.pkl",
            files / f"{num}.return.pkl",
        )
        call = (self.hydra_context, self.task_function, self.config, Singleton.get_state())
        job.call_path.write_bytes(cloudpickle.dumps((*call, num, overrides)))
        job.result_path.unlink(missing_ok=True)
        return job

    def _start(self, job: _Job, context: Any) -> _Job:
        # a job on the CPU opens no CUDA context: it needs no device and no share
        job.gpu = take_gpu(self.gpus) if self.gpus and wants_gpu(job.config) else None
        gpu = (job.gpu.device, job.gpu.fraction) if job.gpu else None
        job.process = context.Process(
            target=worker.main,
            args=(job.call_path, job.result_path, job.log_path, self.threads, gpu),
        )
        job.process.start()
        job.started = time.monotonic()
        log.info(
            "#%d started: %s (pid %d%s, output: %s)",
            job.num,
            job.output_dir.name,
            job.process.pid,
            f", GPU {job.gpu.device}" if job.gpu else "",
            job.log_path,
        )
        return job

    def _end(self, clock: SweepClock, job: _Job, failed: bool, running: list[_Job]) -> str:
        """``clock``'s line for ``job`` ended, with the jobs still ``running``."""
        starts = [j.started for j in running if j is not job]
        return clock.end(failed, job.started, starts, self.n_jobs)

    def _finish(self, job: _Job, clock: SweepClock, running: list[_Job]) -> JobReturn:
        """The job's ``JobReturn``, and its line (``job_lines``): how it ended, after how long,
        and the sweep's progress."""
        code = job.process.exitcode
        wall = duration(time.monotonic() - job.started)
        if code == 0 and job.result_path.exists():
            returned = cloudpickle.loads(job.result_path.read_bytes())
            job.call_path.unlink()
            job.result_path.unlink()
            said, failed = outcome(job.output_dir)
            ended = self._end(clock, job, failed, running)
            log.info("#%d %s after %s; %s", job.num, said, wall, ended)
            return returned
        reason = _death(code)
        tail = _tail(job.log_path)
        log.error(
            "#%d %s after %s; %s; the other jobs go on. Last lines of %s:\n%s",
            job.num,
            reason,
            wall,
            self._end(clock, job, True, running),
            job.log_path,
            "\n".join(tail),
        )
        if not mark_failed(job.output_dir, reason, job.log_path, tail):
            log.error("#%d left no results.json in %s to record it in", job.num, job.output_dir)
        returned = JobReturn(overrides=job.overrides, working_dir=str(job.output_dir))
        returned.status = JobStatus.COMPLETED  # accounted for: the summary reports its failure
        returned.return_value = None
        return returned


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def _stop(running: list[_Job]) -> None:
    """Pass an interruption on to the running jobs (SIGTERM: each saves a checkpoint at the end
    of its step and records it) and wait for them, at most ``STOP_GRACE_S``."""
    for job in running:
        job.process.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for job in running:
        job.process.join(timeout=max(0.0, deadline - time.monotonic()))
        if job.process.exitcode is None:
            job.process.kill()
            log.error("#%d did not stop %.0f s after SIGTERM; killed", job.num, STOP_GRACE_S)


def _death(code: int | None) -> str:
    if code is not None and code < 0:
        name = signal.Signals(-code).name
        why = " (out of memory, or killed from outside)" if name == "SIGKILL" else ""
        return f"killed by {name}{why}"
    if code == 0:
        return "ended without returning its result"
    return f"exited with status {code}"


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    if not path.exists():
        return []
    return path.read_text(errors="replace").splitlines()[-lines:]
