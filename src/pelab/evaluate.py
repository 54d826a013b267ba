"""Re-evaluate a trained checkpoint, e.g. at longer lengths with a RoPE scaling strategy:
``python scripts/eval.py ckpt_path=<run dir>/checkpoints/best.ckpt pe.scaling=yarn
pe.scaling_factor=4 task.eval_lengths=[16,64,128]``.

The model is rebuilt from the training run's resolved config (``<run dir>/results.json``, key
``config``) with only the overrides in ``OVERRIDABLE`` applied; results go to a new
``<run dir>/eval/<timestamp>_<scaling>/results.json`` with training's schema plus ``checkpoint``.
"""

from __future__ import annotations

import inspect
import json
import logging
import pickle
from datetime import datetime
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from pelab.data.datamodule import TaskDataModule
from pelab.errors import ConfigError
from pelab.train import build_model, build_task
from pelab.utils.report import print_results
from pelab.utils.results import recorded, summarize

log = logging.getLogger(__name__)

# The settings an evaluation may change (null in configs/eval.yaml: keep the training value).
OVERRIDABLE = (
    "pe.scaling",
    "pe.scaling_factor",
    "pe.original_max_len",
    "task.eval_lengths",
    "seed",
)


def training_record(ckpt_path: str | Path | None) -> tuple[Path, dict[str, Any]]:
    """``<run dir>/checkpoints/<name>.ckpt`` -> the run dir and its ``results.json``."""
    if not ckpt_path:
        raise ConfigError("set ckpt_path=<run dir>/checkpoints/best.ckpt (the checkpoint to test)")
    ckpt = Path(ckpt_path)
    if not ckpt.is_file():
        raise ConfigError(f"ckpt_path={ckpt} does not exist or is not a file")
    run_dir = ckpt.resolve().parent.parent
    results = run_dir / "results.json"
    try:
        record = json.loads(results.read_text())
    except (OSError, json.JSONDecodeError) as error:
        record, problem = {}, f"{type(error).__name__}: {error}"
    else:
        problem = "" if "config" in record else "it has no 'config' key"
    if problem:
        raise ConfigError(
            f"cannot read the training run's config from {results} (the checkpoint must lie in "
            f"<run dir>/checkpoints/ of a pelab run): {problem}"
        )
    return run_dir, record


def eval_config(cfg: DictConfig, train_cfg: DictConfig, output_dir: Path) -> DictConfig:
    """The training config with the user's ``OVERRIDABLE`` settings and this evaluation's
    trainer, logger and paths."""
    merged = train_cfg.copy()
    with open_dict(merged):
        for key in OVERRIDABLE:
            value = OmegaConf.select(cfg, key)
            if value is None:
                continue
            group, _, option = key.rpartition(".")
            if group == "pe" and option not in train_cfg.pe:
                raise ConfigError(
                    f"{key}={value} is not an option of the checkpoint's encoding "
                    f"({train_cfg.pe._target_}); its options: "
                    f"{[k for k in train_cfg.pe if not k.startswith('_')]}"
                )
            OmegaConf.update(merged, key, value)
        for key in ("trainer", "logger", "paths"):
            merged[key] = cfg.get(key)
        merged.paths.output_dir = str(output_dir)
        merged.ckpt_path = cfg.ckpt_path
    trained = build_task(train_cfg)
    with open_dict(merged):
        pe = merged.pe
        # tables sized by the run (learned, urpe) keep the training size, as build_model set it:
        # urpe then runs at any length, and learned gives its own "cannot extrapolate" error
        # rather than a shape mismatch. Read from the signature: older records lack the key.
        takes_max_len = "max_len" in inspect.signature(get_class(pe._target_)).parameters
        if takes_max_len and pe.get("max_len") is None:
            positions = instantiate(train_cfg.positions)
            pe.max_len = max(trained.max_sequence_length(), positions.max_position)
        # the training context length, which an encoding cannot know by itself
        if pe.get("scaling", "none") != "none" and pe.get("original_max_len") is None:
            hi = trained.train_lengths[1]
            pe.original_max_len = hi + trained.answer_length(hi) + 2
    return merged


def load_weights(model: torch.nn.Module, ckpt: Path) -> None:
    try:
        state = torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]
    except (OSError, RuntimeError, EOFError, KeyError, TypeError, pickle.UnpicklingError) as e:
        raise ConfigError(
            f"ckpt_path={ckpt} is not a readable Lightning checkpoint: {type(e).__name__}: {e}"
        ) from None
    try:
        model.load_state_dict(state)
    except RuntimeError as error:
        raise ConfigError(
            f"the weights in {ckpt} do not fit the model built from its run's config and your "
            f"overrides (an encoding whose parameters depend on the sequence length cannot be "
            f"evaluated at other lengths): {error}"
        ) from None


def evaluate(cfg: DictConfig) -> dict[str, Any]:
    """Test ``cfg.ckpt_path`` on ``task.eval_lengths``; returns the record written to
    ``<run dir>/eval/<timestamp>_<scaling>/results.json``."""
    run_dir, train_record = training_record(cfg.get("ckpt_path"))
    train_cfg = OmegaConf.create(train_record["config"])
    scaling = OmegaConf.select(cfg, "pe.scaling") or train_cfg.pe.get("scaling", "none")
    stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")
    output_dir = run_dir / "eval" / f"{stamp}_{scaling}"
    merged = eval_config(cfg, train_cfg, output_dir)
    record: dict[str, Any] = {
        "status": "running",
        "choices": {**train_record.get("choices", {}), "seed": merged.seed},
        "config": OmegaConf.to_container(merged, resolve=True),
        "checkpoint": str(Path(cfg.ckpt_path).resolve()),
    }
    with recorded(output_dir / "results.json", record):
        L.seed_everything(merged.seed, workers=True)
        task = build_task(merged)
        model = build_model(merged, task)
        load_weights(model, Path(cfg.ckpt_path))
        datamodule = TaskDataModule(
            task,
            batch_size=merged.data.batch_size,
            num_batches=1,
            seed=merged.seed,
            eval_batch_size=merged.data.eval_batch_size,
            cache_dir=merged.paths.cache_dir,
        )
        loggers = [instantiate(c) for c in (merged.get("logger") or {}).values() if c]
        trainer: L.Trainer = instantiate(merged.trainer, logger=loggers or False)
        trainer.test(model, datamodule=datamodule, verbose=False)
        record.update(
            status="completed",
            metrics=summarize(dict(model.final_metrics)),
            train_lengths=list(task.train_lengths),
            params=model.net.num_params(),
        )
        print_results(record, task)
    return record
