"""A job as Hydra runs it: whether it runs in a sweep (``in_sweep``), its directories, its
config-group choices (``choices``), the command that resumes it when it is interrupted
(``interrupted_resume``), and the wrapper of a script's job (``sweep_task``: a single run's
failure propagates, a sweep's is recorded and the sweep goes on; a run ``refused`` by its
settings before any work leaves nothing behind)."""

from __future__ import annotations

import functools
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from pelab.errors import ConfigError, causes
from pelab.record import CHOICE_GROUPS
from pelab.resume_commands import (
    SWEEP_RESUMES,
    resume_command,
    sweep_overrides,
    sweep_resume_command,
)
from pelab.utils.console import route_console

log = logging.getLogger(__name__)


def in_sweep() -> bool:
    """Whether this process runs a job of a Hydra sweep (``-m``)."""
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def sweep_hydra_dir() -> Path | None:
    """The Hydra directory of this job of a sweep; None outside a sweep."""
    return Path(HydraConfig.get().runtime.output_dir) if in_sweep() else None


def sweep_task(job: Callable[[DictConfig], Any]) -> Callable[[DictConfig], None]:
    """A job of a script (``scripts/train.py``, ``scripts/eval.py``), as the Lightning-Hydra
    template's ``task_wrapper``: a single run's failure propagates (exit status 1), and a single
    run ``refused`` before any work leaves no directory behind (Hydra's, when it holds nothing
    else); in a sweep (``-m``) a failed job is recorded (its ``results.json`` says ``failed`` and
    why, if it got that far; its log has the traceback) and the sweep goes on. The console shows
    the run's own lines (``pelab.utils.console``)."""

    @functools.wraps(job)
    def wrapped(cfg: DictConfig) -> None:
        route_console()
        hydra_dir = hydra_output_dir()
        fresh = hydra_dir is not None and _fresh(hydra_dir)
        try:
            job(cfg)
        except Exception as error:
            if not in_sweep():
                if fresh and refused(error):
                    shutil.rmtree(hydra_dir, ignore_errors=True)  # nothing ran
                    remove_empty_parents(hydra_dir, Path.cwd())
                raise
            log.exception("this job failed (its results.json says why); the sweep goes on")

    return wrapped


def remove_empty_parents(path: Path, stop: Path) -> None:
    """Remove the directories above ``path`` that are empty (``logs/eval/runs``, made for a run
    that was refused), up to ``stop``, which stays, as does every directory outside it."""
    stop = stop.resolve()
    for parent in path.resolve().parents:
        if parent == stop or stop not in parent.parents:
            return
        try:
            parent.rmdir()  # only an empty directory
        except OSError:
            return


def hydra_output_dir() -> Path | None:
    """This process's Hydra directory (its log, ``.hydra/``); None outside a Hydra app."""
    if not HydraConfig.initialized():
        return None
    directory = OmegaConf.select(HydraConfig.get(), "runtime.output_dir", default=None)
    return None if directory is None else Path(directory)


def _fresh(job: Path) -> bool:
    """Whether the Hydra directory ``job`` holds nothing but what Hydra wrote for this process
    (its log, ``.hydra/``)."""
    return job.is_dir() and all(p.name == ".hydra" or p.suffix == ".log" for p in job.iterdir())


def refused(error: BaseException) -> bool:
    """Whether ``error`` refuses a single run before any work: a ``ConfigError`` (or one caused
    by it) from the checks before training or evaluation (``pelab.recorder``). Such a run writes no
    record and leaves no directory: the one-line error says it all. A sweep's job records it
    like any failure, so the sweep's summary says why."""
    return not in_sweep() and any(isinstance(e, ConfigError) for e in causes(error))


def interrupted_resume(job_type: str, job_dir: str | Path) -> str:
    """What resumes an interrupted run: its own command, or in a sweep the whole sweep's (a
    Ctrl-C stops the sweep, so the jobs not started yet need it too): ``resume_command``,
    ``sweep_resume_command`` (``pelab.resume_commands``)."""
    if not HydraConfig.initialized():
        return resume_command(job_type, [], job_dir)
    hydra = HydraConfig.get()
    multirun = Path(str(hydra.sweep.dir)) / "multirun.yaml" if in_sweep() else None
    if multirun is not None and multirun.exists():
        script = f"scripts/{job_type}.py"
        sweep = sweep_overrides(OmegaConf.load(multirun))
        command = sweep_resume_command(script, *sweep, hydra.sweep.dir)
        return f"{command} (the whole sweep: {SWEEP_RESUMES})"
    return resume_command(job_type, list(hydra.overrides.task), job_dir)


def choices(cfg: DictConfig) -> dict[str, Any]:
    """The config-group choices of this run (model, pe, task, ...) and its seed."""
    picked = dict(HydraConfig.get().runtime.choices) if HydraConfig.initialized() else {}
    return {**{k: picked.get(k) for k in CHOICE_GROUPS}, "seed": cfg.seed}
