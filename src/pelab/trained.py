"""A trained run, read back: its directory and record from a checkpoint's path
(``training_record``), the sizes its model was built with (``trained_sizes``) and its weights
(``load_weights``), with a ``ConfigError`` naming what cannot be read. Re-evaluation
(``pelab.evaluate``) and ``pelab.load_run`` (``pelab.load``) stand on it."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from pelab.assembly import build_task
from pelab.errors import ConfigError
from pelab.record import RESULTS, read_record
from pelab.reliability.resume.checkpoints import check_integrity


def training_record(ckpt_path: str | Path | None) -> tuple[Path, dict[str, Any]]:
    """``<run dir>/checkpoints/<name>.ckpt`` -> the run dir and its ``results.json``."""
    if not ckpt_path:
        raise ConfigError("set ckpt_path=<run dir>/checkpoints/best.ckpt (the checkpoint to test)")
    ckpt = Path(ckpt_path)
    if not ckpt.is_file():
        raise ConfigError(f"ckpt_path={ckpt} does not exist or is not a file")
    run_dir = ckpt.resolve().parent.parent
    results = run_dir / RESULTS
    try:
        record = read_record(results)
    except (OSError, ValueError) as error:
        record, problem = {}, f"{type(error).__name__}: {error}"
    else:
        problem = "" if "config" in record else "it has no 'config' key"
    if problem:
        raise ConfigError(
            f"cannot read the training run's config from {results} (the checkpoint must lie in "
            f"<run dir>/checkpoints/ of a pelab run): {problem}"
        )
    return run_dir, record


def trained_sizes(record: dict[str, Any], train_cfg: DictConfig) -> dict[str, int]:
    """The ``max_len`` and ``train_max_len`` the checkpoint's model was built with: its
    ``model_dims``, or, for records written before they were kept, what training computed."""
    if dims := record.get("model_dims"):
        return {"max_len": dims["max_len"], "train_max_len": dims["train_max_len"]}
    trained = build_task(train_cfg)
    positions = instantiate(train_cfg.positions)
    return {
        "max_len": max(trained.max_sequence_length(), positions.max_position),
        "train_max_len": trained.max_train_sequence_length(),
    }


def load_weights(model: torch.nn.Module, ckpt: Path) -> None:
    check_integrity(Path(ckpt))
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
