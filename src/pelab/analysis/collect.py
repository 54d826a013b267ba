"""Runs into pandas frames: the ``results.json`` files under a directory (a sweep, or all of
``logs/``), or the runs of a W&B project (``wandb:<entity>/<project>``).

Every job a sweep launched is a row, whatever became of it (``status``):

- ``completed`` or ``failed``: what its ``results.json`` says (a failure keeps its error);
- ``crashed``: the job started (Hydra wrote its ``.hydra/``) but left no ``results.json``: the
  process was killed (out of memory, a time limit) or is still running;
- ``missing``: the sweep's grid (its ``multirun.yaml``) has the job, but no job directory exists.

Re-evaluations (records of ``job_type: eval``, ``pelab.record``) are not training runs and are
skipped.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.config_search_path_impl import ConfigSearchPathImpl
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ValueType
from hydra.core.plugins import Plugins
from hydra.errors import HydraException
from omegaconf import DictConfig, ListConfig, OmegaConf

from pelab.errors import ConfigError
from pelab.lengths import expand_lengths
from pelab.metrics import GROUPS as SPLITS
from pelab.metrics import METRICS
from pelab.record import CHOICE_GROUPS as CHOICES
from pelab.record import (
    COMPETENCE_KEYS,
    MEMBER_KEYS,
    RESULTS,
    job_dir,
    job_key,
    member_grid,
    member_settings,
    read_record,
    run_only,
)

log = logging.getLogger(__name__)

NOT_SET = "-"  # a choice or an override that a run did not set
WANDB_PREFIX = "wandb:"
# the columns of ``runs_frame`` besides the choices and the setting overrides
RUN_FIELDS = (
    "seed",
    "status",
    "error",
    "source",
    "train_min",
    "train_max",
    "wall_time_s",
    "learned",
    "steps_to_learn",
    *(f"{s}/{m}" for s in SPLITS for m in METRICS),
    "val_id",
)
# what a status without an error means
STATUS_NOTES = {"running": "no end recorded: still running, or killed (out of memory, time limit)"}
# W&B run states -> pelab statuses (a run's own ``status`` summary key wins when present)
WANDB_STATES = {"finished": "completed", "failed": "failed", "crashed": "crashed"}


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
        records += _missing(multirun.parent, records, order)
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
    another key."""
    config = OmegaConf.create(record.get("config") or {})
    for key, want in filters.items():
        if key in (*CHOICES, "seed"):
            have = (record.get("choices") or {}).get(key)
        elif key == "tag":
            if want not in (OmegaConf.select(config, "tags") or []):
                return False
            continue
        elif key == "group":
            have = OmegaConf.select(config, "logger.wandb.group")
        elif key == "date":  # a prefix of when it started: 2026-11-24, 2026-11
            if not str(record.get("started", "")).startswith(want):
                return False
            continue
        elif key.startswith("config."):
            have = OmegaConf.select(config, key.removeprefix("config."))
        else:
            valid = ", ".join([*CHOICES, "seed", *FILTER_KEYS, "config.<key>"])
            raise ConfigError(f"--filter {key}=...: unknown key {key!r}; valid keys: {valid}")
        if str(have) != want:
            return False
    return True


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
    return all(_text(OmegaConf.select(config, k, default=None)) == v for k, v in changes.items())


def _text(value: Any) -> str | None:
    """A resolved setting as a table shows it (``0.003``, ``none``); None when unset."""
    if isinstance(value, ListConfig) and not any(OmegaConf.is_config(v) for v in value):
        return "[" + ",".join(_text(v) or "null" for v in value) + "]"  # as an override writes it
    if value is None or OmegaConf.is_config(value):
        return None
    return f"{value:g}" if isinstance(value, float) else str(value)


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
        "choices": _choices(hydra_cfg, config),
        "config": {"task": OmegaConf.to_container(config.task)},
        "source": str(job),
        "job": str(job),
        "overrides": list(OmegaConf.load(job / ".hydra" / "overrides.yaml")),
    }


def _choices(hydra_cfg: DictConfig, config: DictConfig) -> dict[str, Any]:
    return {**{k: hydra_cfg.runtime.choices.get(k) for k in CHOICES}, "seed": config.get("seed")}


def sweep_jobs(multirun: DictConfig) -> list[list[str]]:
    """The override lists of every job of a sweep, expanded by Hydra's own basic sweeper from
    ``hydra.sweeper.params`` and the command-line overrides saved in ``multirun.yaml``; a
    ``glob(...)`` over a config group lists the group in the config tree the sweep was composed
    from (``hydra.runtime.config_sources``), as Hydra did when it launched the sweep."""
    params = multirun.hydra.sweeper.get("params") or {}
    arguments = [f"{k}={v}" for k, v in params.items()] + list(multirun.hydra.overrides.task)
    Plugins.instance()  # registers the config source schemes (file://, pkg://, ...)
    search_path = ConfigSearchPathImpl()
    for source in OmegaConf.select(multirun, "hydra.runtime.config_sources", default=[]):
        search_path.append(source.provider, f"{source.schema}://{source.path}")
    parser = OverridesParser.create(config_loader=ConfigLoaderImpl(search_path))
    overrides = parser.parse_overrides(arguments)
    for override in overrides:
        if override.value_type == ValueType.GLOB_CHOICE_SWEEP and not list(
            override.sweep_string_iterator()
        ):
            roots = [element.path for element in search_path.get_path()]
            raise HydraException(
                f"{override.input_line} matches no config in the sweep's config tree {roots} "
                "(moved or deleted?)"
            )
    return [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]


def _missing(
    sweep_dir: Path, found: list[dict[str, Any]], order: dict[tuple[str, str], int]
) -> list[dict[str, Any]]:
    """The jobs of the sweep's grid that never started (``order`` gets each job's place)."""
    multirun = OmegaConf.load(sweep_dir / "multirun.yaml")
    if OmegaConf.select(multirun, "hydra.job.config_name", default="train") != "train":  # eval
        return []
    try:
        jobs = sweep_jobs(multirun)
    except HydraException as error:  # e.g. a glob(*) whose config tree is gone
        log.warning(
            "cannot expand the grid of %s (%s): missing jobs not detected", sweep_dir, error
        )
        return []
    started = {job_key(r["overrides"]) for r in found if Path(r["job"]).parent == sweep_dir}
    order |= {(str(sweep_dir), job_key(job)): i for i, job in enumerate(jobs)}
    defaults = _choices(multirun.hydra, multirun)
    missing = []
    for job in jobs:
        if job_key(job) in started:
            continue
        picked = _choice_overrides(job)
        choices = {**defaults, **{k: v for k, v in picked.items() if k not in MEMBER_KEYS}}
        # a job of members (seeds=[...], learning_rates=[...]) would have trained one run each
        lists = {k: picked.get(k, multirun.get(k)) for k in MEMBER_KEYS}
        missing += [
            {
                "status": "missing",
                "error": "in the sweep's grid, but no job directory: it never started",
                "choices": {**choices, "seed": seed},
                "source": str(sweep_dir),
                "job": str(sweep_dir),
                "overrides": job,
            }
            | ({} if lr is None else _lr_member(lists, lr))
            for seed, lr in member_grid(choices["seed"], **lists)
        ]
    return missing


def _lr_member(lists: dict[str, Any], lr: float) -> dict[str, Any]:
    """What a missing member of a stack over learning rates needs for ``member_settings``."""
    return {"member_of": lists, "config": {"model": {"optimizer": {"lr": lr}}}}


def _choice_overrides(overrides: list[str]) -> dict[str, Any]:
    parsed = OverridesParser.create().parse_overrides(overrides)
    return {
        o.key_or_group: o.value()
        for o in parsed
        if o.key_or_group in (*CHOICES, "seed", *MEMBER_KEYS)
    }


def setting_overrides(overrides: list[str]) -> dict[str, str]:
    """``["pe=rope", "model.net.d_model=32"]`` -> ``{"model.net.d_model": "32"}``: the settings a
    run changed besides its choices, seed (or the ``MEMBER_KEYS`` of a stack of members, whose
    own settings ``record.member_settings`` gives) and the ``record.RUN_ONLY`` settings (paths,
    loggers, callbacks, ...: they do not change what a run trains)."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    return {
        o.get_key_element(): o.get_value_element_as_str()
        for o in parsed
        if o.key_or_group not in (*CHOICES, "seed", *MEMBER_KEYS) and not run_only(o.key_or_group)
    }


def wandb_records(
    path: str, filters: dict[str, str] | None = None, job_type: str = "train"
) -> list[dict[str, Any]]:
    """The runs of W&B job type ``job_type`` of the W&B project ``path``
    (``entity/project``), as records."""
    import wandb

    try:
        runs = wandb.Api().runs(path, filters=filters or None)
        return [wandb_record(run) for run in runs if run.job_type == job_type]
    except (wandb.errors.CommError, wandb.errors.UsageError, ValueError) as error:
        raise ConfigError(
            f"cannot read the W&B project {path!r} ({error}); it needs `wandb login` and a "
            "network. Runs logged offline: pass their sweep directory instead"
        ) from None


def wandb_record(run: Any) -> dict[str, Any]:
    """A W&B run (``wandb.Api`` object) as the record its ``results.json`` would hold: the
    ``metrics`` section and the training lengths come as data from the run's summary
    (``pelab.runner.finish_wandb``). Under a W&B sweep agent the swept keys are locked to the
    sweep's values (``task: copy``, not the resolved task config), so the config's groups may be
    plain strings: the choices come from ``config.choices``, which no sweep locks."""
    summary = {k: v for k, v in dict(run.summary).items() if not k.startswith("_")}
    config = dict(run.config)
    status = summary.get("status") or WANDB_STATES.get(run.state, run.state)
    return {
        "status": status,
        "error": summary.get("error")
        or (f"W&B state: {run.state}" if status != "completed" else ""),
        "choices": config.get("choices") or {},
        "metrics": dict(summary.get("metrics") or {}) if status == "completed" else {},
        **{key: summary[key] for key in COMPETENCE_KEYS if key in summary},
        "train_lengths": summary.get("train_lengths")
        or _task_config({"config": config}).get("train_lengths"),
        "config": config,
        "overrides": summary.get("overrides") or [],
        **({"member_of": summary["member_of"]} if summary.get("member_of") else {}),
        "source": run.url,
    }


def runs_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per run: its choices, seed, setting overrides, status and error, the in- and
    out-of-distribution means of each metric (``id/exact_match``, ...; NaN unless completed),
    the training length range, the wall time, whether it learned its task (``learned``:
    True/False under a competence budget, None without one) and when (``steps_to_learn``), and
    its last in-distribution validation score (``val_id``: what ``--protocol max|tuned``
    selects on, never a test number). A setting's value is the one the run resolved (its
    ``config``), so a default, an override's ``3e-3`` and a member's ``0.003`` are one value;
    the override's text (or ``NOT_SET``) where the record has no resolved config."""
    rows, settings = [], {}
    for record in records:
        changed = setting_overrides(record.get("overrides") or []) | member_settings(record)
        settings |= dict.fromkeys(changed)
        choices = record.get("choices") or {}
        metrics = record.get("metrics") or {}
        train = record.get("train_lengths") or _task_config(record).get("train_lengths") or []
        row: dict[str, Any] = {k: choices.get(k) or NOT_SET for k in CHOICES}
        row |= {
            "seed": choices.get("seed"),
            "status": record.get("status", "unknown"),
            "error": record.get("error") or STATUS_NOTES.get(record.get("status"), ""),
            "source": record.get("source", ""),
            "train_min": train[0] if train else math.nan,
            "train_max": train[1] if train else math.nan,
            "wall_time_s": record.get("wall_time_s", math.nan),
            # competence budgets (pelab.competence): None when the run had no criterion
            "learned": record.get("learned"),
            "steps_to_learn": _or_nan(record.get("steps_to_learn")),
        }
        for split in SPLITS:
            for metric in METRICS:
                row[f"{split}/{metric}"] = metrics.get(f"test_{split}", {}).get(metric, math.nan)
        row["val_id"] = _validation_score(metrics.get("val") or {}, train)
        rows.append(row | changed)
    for row, record in zip(rows, records, strict=True):  # settings equal once resolved merge
        config = OmegaConf.create(record.get("config") or {})
        for key in settings:
            value = _text(OmegaConf.select(config, key.lstrip("+~"), default=None))
            if value is not None:
                row[key] = value
    frame = pd.DataFrame(rows)
    frame[list(settings)] = frame[list(settings)].fillna(NOT_SET)
    return frame.astype({"seed": "Int64"}) if len(frame) else frame


def lengths_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per run and evaluation length (``run``: the row in ``runs_frame``): the test
    metrics at that length and their chance levels (``chance/exact_match``, ...), NaN where the
    run has none (e.g. it failed; its configured lengths are listed all the same)."""
    chance_columns = [f"chance/{m}" for m in METRICS]
    rows = []
    for run, record in enumerate(records):
        metrics = record.get("metrics") or {}
        measured, chance = metrics.get("test", {}), metrics.get("chance", {})
        for length in measured or expand_lengths(_task_config(record).get("eval_lengths") or []):
            values = measured.get(str(length), {})
            levels = chance.get(str(length), {})
            rows.append(
                {"run": run, "length": int(length)}
                | {m: values.get(m, math.nan) for m in METRICS}
                | {
                    c: levels.get(m, math.nan)
                    for c, m in zip(chance_columns, METRICS, strict=True)
                }
            )
    return pd.DataFrame(rows, columns=["run", "length", *METRICS, *chance_columns])


def _task_config(record: dict[str, Any]) -> dict[str, Any]:
    """The record's resolved task config; ``{}`` when it has none, or only the task's name (a
    W&B sweep agent locks ``task`` to it)."""
    task = (record.get("config") or {}).get("task")
    return task if isinstance(task, dict) else {}


def _validation_score(val: dict[str, dict[str, float]], train: list[int]) -> float:
    """The last validation's in-distribution score, as a run's best checkpoint is chosen
    (``pelab.metrics.selection_score``: exact match, ties broken by token accuracy, scaled
    below the exact match's step); NaN without an in-distribution validation."""
    inside = [v for n, v in val.items() if train and train[0] <= int(n) <= train[1]]
    if not inside:
        return math.nan
    exact = sum(v["exact_match"] for v in inside) / len(inside)
    tokens = sum(v["token_acc"] for v in inside) / len(inside)
    return exact + tokens * 1e-6


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else value
