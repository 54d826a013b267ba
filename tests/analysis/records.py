"""Hand-written run records and job directories, as pelab and Hydra write them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

CHOICES = {"model": "decoder", "positions": "contiguous", "trainer": "default", "experiment": None}


def record(
    pe: str,
    task: str,
    seed: int,
    exact: dict[int, float] | None = None,
    status: str = "completed",
    train: tuple[int, int] = (1, 16),
    chance: float | None = None,
    overrides: list[str] | None = None,
    learned: bool | None = None,
    steps_to_learn: int | None = None,
    token: dict[int, float] | None = None,
) -> dict[str, Any]:
    """A ``results.json`` record; ``exact``: exact match per evaluation length; ``token``: token
    accuracy per length (default: the exact match). Without ``exact`` the run has no metrics
    (it failed).
    ``learned``/``steps_to_learn``: its competence fields (None: no criterion)."""
    lengths = sorted(exact or {8: 0, 16: 0, 32: 0})
    rec: dict[str, Any] = {
        "status": status,
        "choices": {"pe": pe, "task": task, **CHOICES, "seed": seed},
        "config": {"task": {"train_lengths": list(train), "eval_lengths": lengths}},
        "overrides": overrides if overrides is not None else [f"pe={pe}", f"seed={seed}"],
        "source": f"/runs/{pe}_{task}_s{seed}",
    }
    if status != "completed":
        rec["error"] = "ConfigError: deliberately broken\nsecond line"
        return rec
    scores = {"exact_match": exact, "token_acc": token or exact}
    test = {str(n): {m: scores[m][n] for m in scores} for n in exact}
    rec["train_lengths"] = list(train)
    rec["learned"], rec["steps_to_learn"] = learned, steps_to_learn
    rec["metrics"] = {"test": test, "test_id": {}, "test_ood": {}}
    for group, inside in (("test_id", True), ("test_ood", False)):
        for metric, values in scores.items():
            chosen = [v for n, v in values.items() if (train[0] <= n <= train[1]) == inside]
            if chosen:
                rec["metrics"][group][metric] = sum(chosen) / len(chosen)
    if chance is not None:
        rec["metrics"]["chance"] = {
            str(n): {"exact_match": chance, "token_acc": chance} for n in exact
        }
    return rec


def write_job(
    job: Path,
    rec: dict[str, Any] | None,
    choices: dict[str, Any],
    seed: int,
    overrides: list[str],
    config_name: str = "train",
) -> Path:
    """A job directory: ``.hydra/`` as Hydra writes it, and ``results.json`` unless ``rec`` is
    None (a job that was killed)."""
    hydra_dir = job / ".hydra"
    hydra_dir.mkdir(parents=True)
    hydra = {"hydra": {"job": {"config_name": config_name}, "runtime": {"choices": choices}}}
    OmegaConf.save(OmegaConf.create(hydra), hydra_dir / "hydra.yaml")
    config = {"seed": seed, "task": {"train_lengths": [1, 16], "eval_lengths": [8, 16, 32]}}
    OmegaConf.save(OmegaConf.create(config), hydra_dir / "config.yaml")
    OmegaConf.save(OmegaConf.create(overrides), hydra_dir / "overrides.yaml")
    if rec is not None:
        (job / "results.json").write_text(json.dumps(rec))
    return job


def write_multirun(sweep: Path, params: dict[str, str], task_overrides: list[str]) -> None:
    """``multirun.yaml`` of a sweep with grid ``params`` (``hydra.sweeper.params``) and the
    command-line ``task_overrides``."""
    multirun = {
        "hydra": {
            "sweeper": {"params": params},
            "overrides": {"task": task_overrides},
            "runtime": {"choices": {"pe": "rope", "task": "copy", **CHOICES}},
        },
        "seed": 0,
    }
    sweep.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create(multirun), sweep / "multirun.yaml")
