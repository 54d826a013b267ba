"""The commands that resume what was interrupted: a run (``resume_command``) or a whole sweep
(``sweep_resume_command``), as a record's error and a sweep's summary name them."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any


def resume_command(job_type: str, overrides: list[str], job_dir: str | Path) -> str:
    """The command that resumes the run of ``job_type`` launched with ``overrides`` (a sweep's job:
    its own overrides) in ``job_dir``: the run's default directory is timestamped, so it names
    ``hydra.run.dir``."""
    kept = [o for o in overrides if not o.lstrip("+~").startswith("hydra.run.dir=")]
    return shlex.join(["python", f"scripts/{job_type}.py", *kept, f"hydra.run.dir={job_dir}"])


# the overrides a resume adds to the command that started a job (``skip_completed``: a sweep's
# re-run, ``resume``/``ckpt_path``: a run's), left out where that command is shown
RESUMING = ("skip_completed", "resume", "ckpt_path")


def started_with(overrides: list[str]) -> list[str]:
    """``overrides`` as the job was started: without what a resume added (``RESUMING``)."""
    return [o for o in overrides if o.lstrip("+~").split("=")[0] not in RESUMING]


# what re-running a sweep with ``sweep_resume_command`` does, said beside the command
SWEEP_RESUMES = (
    "its completed jobs keep their records, interrupted ones resume from their last checkpoint, "
    "the jobs not started yet run"
)


def sweep_resume_command(
    script: str, task: list[str], hydra: list[str], sweep_dir: str | Path
) -> str:
    """The command that resumes a whole sweep (``-m``) of ``script`` launched with the
    ``task`` and ``hydra`` overrides (its own, not a job's) into ``sweep_dir``
    (``SWEEP_RESUMES``: ``pelab.train.train``)."""
    hydra = [o for o in hydra if not o.startswith(("hydra.sweep.dir=", "hydra.mode="))]
    task = [o for o in task if not o.startswith("skip_completed=")]
    words = ["python", script, "-m", *hydra, *task, f"hydra.sweep.dir={sweep_dir}"]
    return shlex.join([*words, "skip_completed=true"])


def sweep_overrides(config: Any) -> tuple[list[str], list[str]]:
    """The ``task`` and ``hydra`` overrides a sweep was launched with, from its config (the
    launcher's, or the ``multirun.yaml`` in its directory)."""
    from omegaconf import OmegaConf

    task = OmegaConf.select(config, "hydra.overrides.task", default=[]) or []
    hydra = OmegaConf.select(config, "hydra.overrides.hydra", default=[]) or []
    return [str(o) for o in task], [str(o) for o in hydra]
