"""Re-running without repeating finished work: with ``skip_completed=true`` (or ``resume=true``,
the default, ``pelab.train.train``), a job whose
output directory already holds a ``completed`` ``results.json`` of the same config returns that
record without training. Hydra names each job's directory after its choices and overrides
(``record.job_key``), so a sweep re-run, or grown, with the same fixed ``hydra.sweep.dir`` finds
its finished jobs; unfinished ones resume from their last checkpoint (``resume=true``)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from pelab.errors import ConfigError
from pelab.record import COMPLETED, RESULTS, RUN_ONLY, RUN_ONLY_TRAINER
from pelab.reliability.resume.checkpoints import TRAJECTORY_KEYS, differences

log = logging.getLogger(__name__)


def comparable(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` without the settings that may differ on a re-run (``record.RUN_ONLY``)."""
    kept = {k: v for k, v in config.items() if k not in RUN_ONLY}
    if isinstance(kept.get("trainer"), dict):
        kept["trainer"] = {k: v for k, v in kept["trainer"].items() if k not in RUN_ONLY_TRAINER}
    return kept


def completed_record(cfg: DictConfig) -> dict[str, Any] | None:
    """The output directory's ``completed`` record when its config equals ``cfg`` (up to the
    ``RUN_ONLY`` settings); ``None`` when the job still has to run (no record, not completed, or
    only evaluation settings changed: it then resumes from its last checkpoint and re-tests).
    A ``ConfigError`` when the directory holds a completed run with other training settings,
    which this job must not overwrite."""
    path = Path(cfg.paths.output_dir) / RESULTS
    try:
        record = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if record.get("status") != COMPLETED or "config" not in record:
        return None
    current = OmegaConf.to_container(cfg, resolve=True)
    changed = differences(comparable(record["config"]), comparable(current))
    if not changed:
        log.info("%s already holds this completed run: not training or testing again", path)
        return record
    if any(_is_trajectory(c) for c in changed):
        raise ConfigError(
            f"{path} holds a completed run with other training settings; use "
            f"another output directory (hydra.sweep.dir) for this config:\n  "
            + "\n  ".join(changed)
        )
    log.info(
        "evaluation settings changed since the completed run, re-testing: %s", "; ".join(changed)
    )
    return None


def _is_trajectory(change: str) -> bool:
    key = change.split(":", 1)[0]
    return any(key == k or key.startswith(f"{k}.") for k in TRAJECTORY_KEYS)
