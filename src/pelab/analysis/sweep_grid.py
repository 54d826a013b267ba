"""A sweep's grid, from its ``multirun.yaml``: every job it planned (``sweep_jobs``, as Hydra's
basic sweeper expands it) and the jobs that never started (``missing_jobs``: a record of status
``missing`` per member each would have trained).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.config_search_path_impl import ConfigSearchPathImpl
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ValueType
from hydra.core.plugins import Plugins
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from pelab.record import CHOICE_GROUPS as CHOICES
from pelab.record import MEMBER_KEYS, job_key, member_grid

log = logging.getLogger(__name__)


def job_choices(hydra_cfg: DictConfig, config: DictConfig) -> dict[str, Any]:
    """A job's choices (its config groups' options) and seed, from its Hydra and job configs."""
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


def missing_jobs(
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
    defaults = job_choices(multirun.hydra, multirun)
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
