"""What each job of a SLURM sweep asks (``hydra/launcher=slurm``): the launcher's ``null``
resources filled in from the runs (``pelab.reliability.cluster.slurm.job_resources``, from the
parameters a job trains, ``n_params``, and the peak a previous run of it measured,
``slurm.measured_peak_mb``), then checked against the partition's limits (``slurm.unfit``). The
parameters are counted here, not in ``pelab.reliability``: counting them builds the model
(``pelab.sizing``), which reliability never reaches (``tests/test_layering.py``)."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

AUTO_KEYS = ("gpus_per_node", "cpus_per_task", "mem_gb")


def slurm_params(params: dict[str, Any], jobs: Iterable[tuple[Any, Path]]) -> dict[str, Any]:
    """The launcher's parameters ``params`` with ``null`` resources from the runs (the largest
    over the array's ``jobs``: each one's composed config and directory, read only when a
    resource is ``null``), checked against the partition's limits (a ``ConfigError`` naming each
    exceeded one)."""
    from pelab.errors import ConfigError
    from pelab.reliability.cluster.slurm import (
        job_resources,
        measured_peak_mb,
        partition_limits,
        unfit,
    )

    if shutil.which("srun") is None or shutil.which("sbatch") is None:
        raise ConfigError(
            "hydra/launcher=slurm: this host has no SLURM client (srun, sbatch not found); "
            "run from a cluster's login node, or sweep here with hydra/launcher=parallel"
        )
    params = dict(params)
    limits = partition_limits(params.get("partition"))
    if any(params.get(k) is None for k in AUTO_KEYS):
        max_cpus = max((n.cpus for n in limits.nodes), default=None) if limits else None
        asked = [
            job_resources(cfg, n_params(cfg), measured_peak_mb(job_dir), max_cpus)
            for cfg, job_dir in jobs
        ]
        chosen = {
            "gpus_per_node": max(r.gpus for r in asked),
            "cpus_per_task": max(r.cpus for r in asked),
            "mem_gb": max(r.mem_gb for r in asked),
        }
        for key, value in chosen.items():
            if params.get(key) is None:
                params[key] = value
        log.info("SLURM resources of each job: %s", "; ".join(asked[0].why))
    if not params.get("gpus_per_node"):
        params.pop("gpus_per_node", None)  # 0: no gres at all (a CPU cluster has none)
    if limits is not None:
        problems = unfit(
            limits,
            params.get("gpus_per_node") or 0,
            params.get("cpus_per_task") or 1,
            params.get("mem_gb"),
            params.get("timeout_min"),
        )
        if problems:
            raise ConfigError(
                f"partition {limits.name} can never start these jobs: " + "; ".join(problems)
            )
    return params


def n_params(cfg: Any) -> int | None:
    """The parameters a job trains (its members' stacked network), as ``pelab.train`` counts
    them for its threads; None when the model cannot be built here."""
    try:
        from pelab.members import Job
        from pelab.sizing import built, trained_parameters

        job = Job.of(cfg)
        return trained_parameters(job, built(job)[1])
    except Exception as error:  # the job reports its own configuration errors
        log.warning("could not build the model to size the job (%r): threads=auto assumed", error)
        return None
