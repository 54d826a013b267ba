"""The run record, ``results.json``: one schema for training runs and re-evaluations, defined
here and nowhere else, written atomically, read by every later tool.

Keys (``SCHEMA_VERSION`` 4; a record without ``schema_version`` is version 1; ``read_record``
reads versions 1 and 2, which called ``job_type`` ``kind``, with ``job_type``; version 4 added
``interrupted``, ``resumed_from_step`` and an evaluation's ``evaluation`` settings):

- ``schema_version``; ``job_type``: ``train`` or ``eval`` (a re-evaluation of a checkpoint; W&B's
  job type too);
- ``status`` (``STATUSES``): ``running`` (written on entry: a job killed outright keeps it),
  ``completed``, ``failed`` or ``interrupted`` (SIGTERM, Ctrl-C: it resumes), with ``error``
  (one line) when not completed; ``started``: when (ISO 8601, local time). A run refused for
  its config before any work leaves no record (``pelab.hydra_job.refused``);
- ``choices``: the config-group choices (model, pe, task, ...) and the seed; ``config``: the
  resolved config (a re-evaluation's: the training run's, with what the evaluation changed);
  ``eval`` only: ``eval_overrides``, what it changed
  (``["pe.scaling=yarn"]``), and ``evaluation``, its own trainer, logger, callbacks, paths and
  threads (how it ran, not what was trained);
- ``metrics``: ``pelab.metrics.summary`` (test per length, its in- and out-of-distribution
  means, the last validation, the chance levels);
- ``train_lengths``; ``params`` (``total``, ``pe``); ``model_dims``: the ``ModelDims`` the
  model was built with (re-evaluation rebuilds the model with them); ``resumed_from`` (the
  checkpoint) and ``resumed_from_step`` (its step), and ``warnings``, when there are any;
- ``checkpoint``: the file the test scores come from (a training run's: its ``best.ckpt``, with
  ``checkpoint_step``, its training step; absent when nothing was tested from a file);
- ``attention``: the attention ``kernel`` the run's forward passes dispatched on its device
  (``flash``, ``memory-efficient``, ``math``, ``eager``, ...) and its ``dtype``
  (``pelab.kernels``);
- training runs: ``learned`` (``null`` without ``learned_at``), ``steps_to_learn`` and
  ``stop_reason`` (``learned``, ``max_steps``, ``failed`` or ``interrupted``;
  ``pelab.competence``);
- a member of a stack (``seeds=[...]`` and/or ``learning_rates=[...]``, ``pelab.members``):
  ``member_of`` (the stack's ``seeds``, ``learning_rates`` (null: the config's one), directory
  and ``fit_time_s``, the members' shared training time; the member's own ``wall_time_s`` is its
  test); its run lies in ``member_dir(<stack dir>, seed, lr)``;
- training runs: ``time_split_s``, where the (last attempt's) time went: ``startup``,
  ``training`` (and ``steps``), ``validation`` (and ``validations``) and ``test`` seconds
  (``phase_times``);
- ``wall_time_s`` (a resumed run: the total, and ``wall_time_parts_s`` the attempts'), library
  ``versions``, ``python``, ``git_commit`` and ``git_dirty`` (the code under ``src/``,
  ``configs/``, ``scripts/`` differs from the commit, untracked files included), and when dirty
  ``git_changes``, ``git_patch`` and ``git_patch_sha256``, what rebuilds it (``provenance``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import tempfile
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from pelab.errors import causes, storage_fault
from pelab.provenance import code_state

log = logging.getLogger(__name__)

PACKAGES = ("pelab", "torch", "lightning", "hydra-core", "wandb", "datasets")
SCHEMA_VERSION = 4
JOB_TYPES = ("train", "eval")
# a record's ``status``: written on entry (``RUNNING``), then how the run ended
RUNNING, COMPLETED, FAILED, INTERRUPTED = "running", "completed", "failed", "interrupted"
STATUSES = (RUNNING, COMPLETED, FAILED, INTERRUPTED)
RESULTS = "results.json"  # the record's file name in a run's output directory
# a training run's competence fields (``pelab.competence``)
COMPETENCE_KEYS = ("learned", "steps_to_learn", "stop_reason")
# the config groups whose choices a record keeps (``choices``, beside the seed)
CHOICE_GROUPS = ("model", "pe", "task", "positions", "trainer", "experiment")


# overrides that say how a job runs, not what it trains (``threads``: torch's CPU threads)
BOOKKEEPING = ("skip_completed", "resume", "ckpt_path", "threads")
# settings that change neither the training nor the evaluation (top-level keys, and keys of
# ``trainer``): a re-run may change them and is the same job (``reliability.resume.completed``),
# in the same directory (``job_key``), in the same row of a table (``analysis.collect``)
RUN_ONLY = (*BOOKKEEPING, "paths", "logger", "callbacks", "tags")
RUN_ONLY_TRAINER = ("enable_progress_bar", "log_every_n_steps", "enable_model_summary")
# of ``data``: the loader's worker processes make the same batches (tests/data)
RUN_ONLY_DATA = ("num_workers",)


def run_only(key: str) -> bool:
    """Whether the config key (or override key, ``+`` / ``~`` allowed) is a ``RUN_ONLY`` one."""
    first, _, rest = key.lstrip("+~").partition(".")
    return (
        first in RUN_ONLY
        or (first == "trainer" and rest in RUN_ONLY_TRAINER)
        or (first == "data" and rest in RUN_ONLY_DATA)
    )


def job_key(overrides: list[str]) -> str:
    """A job's key in its sweep: a short hash of its overrides but the ``RUN_ONLY`` ones, in any
    order (a key given twice counts once, with its last value, as Hydra applies it). It names
    the job's directory (``configs/hydra/default.yaml``), so a job keeps its directory when the
    sweep grows (``seed=0,1`` -> ``seed=0,1,2``) and ``skip_completed=true`` finds what it
    finished; ``collect`` matches a sweep's planned jobs to its directories by it."""
    latest = {o.split("=")[0].lstrip("+~"): o for o in overrides}  # a repeated key: the last
    kept = sorted(o for key, o in latest.items() if not run_only(key))
    return hashlib.sha1("\n".join(kept).encode()).hexdigest()[:8]


# the keys whose lists make a job a stack of members (``pelab.members``), one per combination
MEMBER_KEYS = ("seeds", "learning_rates")
LR_KEY = "model.optimizer.lr"  # the setting a member of ``learning_rates`` changes


def is_stack(config: Any) -> bool:
    """Whether a run's config trains a stack of members (a list in one of ``MEMBER_KEYS``)."""
    return any(config.get(key) is not None for key in MEMBER_KEYS)


def member_grid(
    seed: int, seeds: list[int] | None = None, learning_rates: list[float] | None = None
) -> list[tuple[int, float | None]]:
    """The ``(seed, learning rate)`` of each member of a job: ``seeds`` (or ``[seed]``) x
    ``learning_rates`` (or the config's one: ``None``), learning rates outermost."""
    return [(s, lr) for lr in learning_rates or [None] for s in seeds or [seed]]


def member_dir(job_dir: str | Path, seed: int, lr: float | None = None) -> Path:
    """Where the member of ``seed`` (and learning rate ``lr``, if the stack has a list of them) of
    a stack (``pelab.members``) in ``job_dir`` keeps its run: its ``results.json`` says
    ``member_of``."""
    return Path(job_dir) / (f"seed_{seed}" if lr is None else f"lr_{lr:g}_seed_{seed}")


def member_settings(record: dict[str, Any]) -> dict[str, str]:
    """The setting a member of a stack over ``learning_rates`` has on its own, as an override
    would name it (``{"model.optimizer.lr": "0.001"}``); ``{}`` for every other record."""
    if not (record.get("member_of") or {}).get("learning_rates"):
        return {}
    return {LR_KEY: f"{record['config']['model']['optimizer']['lr']:g}"}


def job_dir(results: str | Path, record: dict[str, Any]) -> Path:
    """The directory of the job that wrote the record at ``results``: the run's own directory,
    or for a member of a stack the stack's (found from where the record lies, so a moved or
    copied sweep directory still reads)."""
    run = Path(results).parent
    return run.parent if "member_of" in record else run


def new_record(job_type: str, choices: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """The record of a run that starts now (``status: running``)."""
    if job_type not in JOB_TYPES:
        raise ValueError(f"unknown job type {job_type!r}; valid choices: {JOB_TYPES}")
    return {
        "schema_version": SCHEMA_VERSION,
        "job_type": job_type,
        "status": RUNNING,
        "started": datetime.now().astimezone().isoformat(timespec="seconds"),
        "choices": choices,
        "config": config,
    }


def read_record(path: str | Path) -> dict[str, Any]:
    """A ``results.json``, with ``schema_version`` and ``job_type`` filled in for older records:
    versions 1 and 2 called it ``kind`` (dropped here); a version 1 record without it is a
    re-evaluation if it has a ``checkpoint``."""
    record = json.loads(Path(path).read_text())
    record.setdefault("schema_version", 1)
    old = record.pop("kind", None)
    record.setdefault("job_type", old or ("eval" if "checkpoint" in record else "train"))
    return record


def write_json_atomic(path: str | Path, data: dict[str, Any]) -> Path:
    """Write ``data`` as JSON via a temporary file and ``os.replace``: readers see the old file or
    the complete new one, never a partial write. The file gets the mode any new file gets
    (``0o666`` less the umask), not ``mkstemp``'s private ``0o600``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, sort_keys=False, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def environment() -> dict[str, Any]:
    """Library versions, Python, and the code that ran (``provenance.code_state``: the git
    commit, whether the code differs from it, and what rebuilds it)."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    return {"versions": versions, "python": platform.python_version(), **code_state()}


def failure_reason(error: BaseException, resume: str | None = None) -> str:
    """``error`` as one line for ``results.json``; interruptions say how to resume (the exact
    command ``resume``, ``pelab.resume_commands``, when known)."""
    how = (
        f"to resume: {resume}"
        if resume
        else "re-run the same command in the same output directory (hydra.run.dir=<it>) to "
        "resume from last.ckpt"
    )
    if interrupted(error):
        names = {type(e).__name__ for e in causes(error)}
        if "SIGTERMException" in names:
            return f"interrupted by SIGTERM (pre-emption, a time limit or kill); {how}"
        return f"interrupted by Ctrl-C (KeyboardInterrupt); {how}"
    return storage_fault(error) or f"{type(error).__name__}: {error}"


def interrupted(error: BaseException) -> bool:
    """Whether ``error`` is (caused by) SIGTERM or Ctrl-C: a run that can be resumed."""
    names = {type(e).__name__ for e in causes(error)}
    return bool(names & {"SIGTERMException", "KeyboardInterrupt"})


def ended_status(error: BaseException) -> str:
    """The status of a run that ``error`` ended: ``interrupted`` (it resumes) or ``failed``."""
    return INTERRUPTED if interrupted(error) else FAILED


def earlier_wall_times(path: str | Path) -> list[float]:
    """The wall times of the earlier attempts of the run whose record is ``path``: a resume
    continues it, and a completed run run again (it resumes at its last step and tests again)
    keeps its training's time (issue 45: its record said 3 s, not 62); ``wall_time_parts_s``,
    or its ``wall_time_s``; ``[]`` for none, or an attempt killed outright (no time)."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return []
    if "wall_time_s" not in record:
        return []
    return list(record.get("wall_time_parts_s") or [record["wall_time_s"]])
