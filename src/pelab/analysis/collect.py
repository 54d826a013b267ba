"""Reading run records (``load_records``): the ``results.json`` files under a directory (a
sweep, or all of ``logs/``), or the runs of a W&B project (``wandb:<entity>/<project>``,
``wandb_records``); ``frames`` turns them into pandas frames.

Every job a sweep launched is a record, whatever became of it (``status``):

- ``completed`` or ``failed``: what its ``results.json`` says (a failure keeps its error);
- ``crashed``: the job started (Hydra wrote its ``.hydra/``) but left no ``results.json``: the
  process was killed (out of memory, a time limit) or is still running;
- ``missing``: the sweep's grid (its ``multirun.yaml``, ``sweep_grid``) has the job, but no job
  directory exists.

Re-evaluations (records of ``job_type: eval``, ``pelab.record``) are not training runs and are
read apart (``eval_records``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from pelab.analysis.frames import setting_overrides, setting_text
from pelab.analysis.sweep_grid import job_choices, missing_jobs
from pelab.analysis.wandb_records import wandb_records
from pelab.errors import ConfigError
from pelab.record import CHOICE_GROUPS as CHOICES
from pelab.record import COMPETENCE_KEYS, RESULTS, job_dir, job_key, read_record

WANDB_PREFIX = "wandb:"


def load_records(
    sources: Iterable[str | Path], filters: dict[str, str] | None = None, job_type: str = "train"
) -> list[dict[str, Any]]:
    """The records of every source of one ``job_type`` (``train``: training runs, ``eval``:
    re-evaluations): a directory, or ``wandb:<entity>/<project>`` (online; ``filters`` select
    runs as W&B's API does, e.g. ``{"group": ...}``, ``{"sweep": <id>}``,
    ``{"config.run_name": "ablation_cpu"}``)."""
    records: list[dict[str, Any]] = []
    for source in sources:
        if str(source).startswith(WANDB_PREFIX):
            records += wandb_records(str(source)[len(WANDB_PREFIX) :], filters, job_type)
        elif Path(source).is_dir():
            found = (
                directory_records(Path(source))
                if job_type == "train"
                else eval_records(Path(source))
            )
            records += [r for r in found if matches(r, filters or {})]
        else:
            raise ConfigError(
                f"{source} is neither a directory of runs (a sweep directory, logs/...) nor "
                f"{WANDB_PREFIX}<entity>/<project>"
            )
    return records


def directory_records(root: Path) -> list[dict[str, Any]]:
    """Every training run under ``root``: finished ones from their ``results.json``, crashed
    ones from their ``.hydra/`` directory, missing ones from their sweep's ``multirun.yaml``."""
    records = []
    for path in sorted(root.rglob(RESULTS), key=_natural):
        record = read_record(path)
        if record["job_type"] == "train":
            job = job_dir(path, record)  # a member of a stack: the job that trained the stack
            where = {"source": str(path.parent), "job": str(job), "overrides": _overrides(job)}
            records.append({**record, **where})
    jobs = {r["job"] for r in records}
    for hydra_dir in sorted(root.rglob(".hydra"), key=_natural):
        job = hydra_dir.parent
        if str(job) not in jobs and (record := _crashed(job)) is not None:
            records.append(record)
    order: dict[tuple[str, str], int] = {}  # (sweep dir, job key) -> the job's place in its plan
    for multirun in sorted(root.rglob("multirun.yaml")):
        records += missing_jobs(multirun.parent, records, order)
    return [r for _, r in sorted(enumerate(records), key=lambda item: _planned(*item, order))]


def _planned(index: int, record: dict[str, Any], order: dict[tuple[str, str], int]) -> tuple:
    """Sort key: a sweep's jobs in the order its grid lists them (its directories no longer
    carry a job number), every other record where it was found."""
    job = Path(record["job"])
    sweep = job if record["status"] == "missing" else job.parent
    place = order.get((str(sweep), job_key(record.get("overrides") or [])), index)
    return (_natural(sweep), place, index)


# ``--filter`` keys of local sources beside the choices, ``seed`` and ``config.<key>``
FILTER_KEYS = ("tag", "group", "date")


def matches(record: dict[str, Any], filters: dict[str, str]) -> bool:
    """Whether a record passes every filter, as W&B's filters select runs: a choice (``pe``,
    ``task``, ``model``, ...) or ``seed`` equal to the value, ``tag`` among its tags, ``group``
    its W&B group (its sweep), ``date`` a prefix of when it started (``2026-11-24``; records
    from before ``started`` was kept never match), ``config.<key>`` a config value
    (``config.run_name=ablation_cpu``, ``config.model.net.d_model=32``); a ``ConfigError`` for
    another key. A value may list alternatives, any of which passes: ``pe=rope,alibi`` (a
    value in brackets, ``[1,8]``, is one value)."""
    if not filters:
        return True
    if set(filters) <= {*CHOICES, "seed", "date"}:  # no config needed (it is slow to build)
        config = OmegaConf.create({})
    else:
        config = OmegaConf.create(record.get("config") or {})
    for key, value in filters.items():
        wanted = alternatives(value)
        if key in (*CHOICES, "seed"):
            have = (record.get("choices") or {}).get(key)
        elif key == "tag":
            if not set(wanted) & set(OmegaConf.select(config, "tags") or []):
                return False
            continue
        elif key == "group":
            have = OmegaConf.select(config, "logger.wandb.group")
        elif key == "date":  # a prefix of when it started: 2026-11-24, 2026-11
            if not str(record.get("started", "")).startswith(tuple(wanted)):
                return False
            continue
        elif key.startswith("config."):
            have = OmegaConf.select(config, key.removeprefix("config."))
        else:
            valid = ", ".join([*CHOICES, "seed", *FILTER_KEYS, "config.<key>"])
            raise ConfigError(f"--filter {key}=...: unknown key {key!r}; valid keys: {valid}")
        if str(have) not in wanted:
            return False
    return True


def alternatives(value: str) -> list[str]:
    """A filter's values: ``rope,alibi`` -> ``["rope", "alibi"]``; commas inside brackets belong
    to one value (``[1,8]``)."""
    values, depth, start = [], 0, 0
    for i, char in enumerate(value):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            values.append(value[start:i])
            start = i + 1
    return [*values, value[start:]]


def merged_filters(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """``--filter`` pairs as one filter per key: a key given twice takes either value
    (``pe=rope --filter pe=alibi`` is ``pe=rope,alibi``)."""
    merged: dict[str, str] = {}
    for key, value in pairs:
        merged[key] = f"{merged[key]},{value}" if key in merged else value
    return merged


def eval_records(root: Path, as_trained: bool = True) -> list[dict[str, Any]]:
    """Every re-evaluation under ``root`` (``scripts/eval.py``: beside its checkpoint's run, or
    linked from an evaluation sweep's job directory; each counted once). Its settings are the
    training job's overrides followed by what the evaluation changed (``eval_overrides``), so a
    table tells apart the runs and the ways they were re-evaluated; each carries its training
    run's ``learned`` (``COMPETENCE_KEYS``). Each completed training run re-evaluated is also a
    row as trained (its own record: its settings resolved, e.g. ``pe.scaling=none``), unless one
    of its re-evaluations changed nothing it was trained with (``as_trained=False``: none)."""
    records, seen = [], set()
    baselines: dict[Path, dict[str, Any] | None] = {}  # training record -> its as-trained row
    for path in sorted(root.rglob(RESULTS), key=_natural):
        resolved = path.resolve()
        if resolved in seen or not resolved.is_file():
            continue
        seen.add(resolved)
        record = read_record(resolved)
        if record["job_type"] != "eval":
            continue
        trained = resolved.parents[2] / RESULTS  # <run dir>/eval/<name>/results.json
        source = read_record(trained) if trained.is_file() else {}
        job = job_dir(trained, source) if source else trained.parent
        overrides = _overrides(job) + list(record.get("eval_overrides") or [])
        learned = {k: source[k] for k in COMPETENCE_KEYS if k in source and record.get(k) is None}
        records.append(
            {**record, **learned, "source": str(resolved.parent), "job": str(job)}
            | {"overrides": overrides}
        )
        if source.get("status") == "completed" and trained not in baselines:
            baselines[trained] = {
                **source,
                "source": str(trained.parent),
                "job": str(job),
                "overrides": _overrides(job),
            }
        if _as_trained(record, source):  # the run evaluated as trained: no second row of it
            baselines[trained] = None
    return records + [b for b in baselines.values() if b is not None and as_trained]


def _as_trained(evaluation: dict[str, Any], trained: dict[str, Any]) -> bool:
    """Whether every setting a re-evaluation changed has the value the run was trained with."""
    config = OmegaConf.create(trained.get("config") or {})
    changes = setting_overrides(list(evaluation.get("eval_overrides") or []))
    return all(
        setting_text(OmegaConf.select(config, k, default=None)) == v for k, v in changes.items()
    )


def _natural(path: Path) -> list[str | int]:
    """Sort key: job ``10_...`` after job ``9_...``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


def _overrides(job: Path) -> list[str]:
    """The job's command-line overrides, as Hydra saved them in its directory."""
    path = job / ".hydra" / "overrides.yaml"
    return list(OmegaConf.load(path)) if path.exists() else []


def _crashed(job: Path) -> dict[str, Any] | None:
    hydra_cfg = OmegaConf.load(job / ".hydra" / "hydra.yaml").hydra
    if hydra_cfg.job.config_name != "train":  # e.g. scripts/eval.py's own log directory
        return None
    config = OmegaConf.load(job / ".hydra" / "config.yaml")
    return {
        "status": "crashed",
        "error": "no results.json: the job was killed (out of memory, time limit) or still runs",
        "choices": job_choices(hydra_cfg, config),
        "config": {"task": OmegaConf.to_container(config.task)},
        "source": str(job),
        "job": str(job),
        "overrides": list(OmegaConf.load(job / ".hydra" / "overrides.yaml")),
    }
