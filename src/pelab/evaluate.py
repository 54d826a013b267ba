"""Re-evaluate a trained checkpoint, e.g. at longer lengths with a RoPE scaling strategy:
``python scripts/eval.py ckpt_path=<run dir>/checkpoints/best.ckpt pe.scaling=yarn
pe.scaling_factor=4 task.eval_lengths=[8,16,64,128]``.

The model is rebuilt from the training run's record (``<run dir>/results.json``): its resolved
``config`` and the ``model_dims`` it was built with (so tables sized by the run keep their
size). Any option of the checkpoint's encoding (``pe.<option>``, checked against the encoding
like every setting), ``task.eval_lengths`` and ``seed`` may be changed; evaluation knows no
encoding. Its record lives as a training run's does (``pelab.recorder``): the record goes to
``<run dir>/eval/<timestamp>_<pe overrides>/results.json`` with training's schema,
``job_type: eval``, the ``checkpoint``, the ``eval_overrides`` and, apart from the trained run's
settings in ``config``, the evaluation's own (``EVALUATION_KEYS``) in ``evaluation``. A
re-evaluation refused before it tests (a bad length, weights that do not fit) writes no record.
In a sweep (``-m``, e.g. over
``pe.scaling=none,linear,yarn``) each job's Hydra directory links to its record
(``results.json``), so the sweep summary and ``make_table.py <eval sweep dir>`` find them;
``make_table.py`` tabulates re-evaluations apart from training runs (``eval/`` tables).
"""

from __future__ import annotations

import inspect
import logging
from datetime import datetime
from pathlib import Path
from typing import Any

from hydra.utils import get_class
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from pelab.assembly import build_model, build_task, data_module
from pelab.config_files import schedule_options  # also stores eval.yaml's eval_pe_options
from pelab.errors import ConfigError
from pelab.hydra_job import sweep_hydra_dir, sweep_task
from pelab.outcome import scored_outcome
from pelab.preflight import Preflight
from pelab.record import RESULTS
from pelab.recorder import Planned, Recorder
from pelab.reliability.checks.validate import check_types
from pelab.threads import check_threads
from pelab.trained import trained_sizes, training_record
from pelab.trainer import make_trainer, run_loggers

log = logging.getLogger(__name__)

OTHER_OVERRIDABLE = ("task.eval_lengths", "seed")  # beside every option of the encoding
# how an evaluation runs, not what it evaluates: its record keeps them apart (``evaluation``)
EVALUATION_KEYS = ("trainer", "logger", "callbacks", "paths", "threads", "ckpt_path", "test")


def pe_overrides(cfg: DictConfig) -> dict[str, Any]:
    """The encoding options this evaluation sets (every non-null ``pe.<option>``)."""
    return {k: v for k, v in (cfg.get("pe") or {}).items() if v is not None}


def eval_overrides(cfg: DictConfig) -> list[str]:
    """What this evaluation changed, as overrides (``pe.scaling=yarn``,
    ``task.eval_lengths=[16,64]``, ``seed=1``): what tells its row of an evaluation table from
    the others."""
    changed = {f"pe.{k}": v for k, v in pe_overrides(cfg).items()}
    changed |= {k: OmegaConf.select(cfg, k) for k in OTHER_OVERRIDABLE}
    return [
        f"{k}=[{','.join(map(str, v))}]" if isinstance(v, ListConfig | list) else f"{k}={v}"
        for k, v in changed.items()
        if v is not None
    ]


def eval_config(cfg: DictConfig, train_cfg: DictConfig, output_dir: Path) -> DictConfig:
    """The training config with this evaluation's encoding options, ``OTHER_OVERRIDABLE``
    settings, trainer, logger, callbacks (none by default) and paths; a ``ConfigError`` for an
    option the checkpoint's encoding does not take."""
    merged = train_cfg.copy()
    accepted = list(inspect.signature(get_class(train_cfg.pe._target_)).parameters)[1:]
    accepted += schedule_options()  # e.g. Llama 4's NoPE-layer temperature, at inference
    with open_dict(merged):
        for option, value in pe_overrides(cfg).items():
            if option not in accepted:
                raise ConfigError(
                    f"pe.{option}={value} is not an option of the checkpoint's encoding "
                    f"({train_cfg.pe._target_}); its options: {', '.join(accepted) or 'none'}"
                )
            if option == "layers" and train_cfg.pe.get("layers") is None:
                raise ConfigError(
                    f"pe.layers=[{','.join(value)}]: the checkpoint was trained without a "
                    "schedule, and its encoding's weights are stored as such; a run trained "
                    "with pe.layers may change its layers and pe.nope_temperature here"
                )
            merged.pe[option] = value
        for key in OTHER_OVERRIDABLE:
            value = OmegaConf.select(cfg, key)
            if value is not None:
                OmegaConf.update(merged, key, value)
        for key in ("trainer", "logger", "callbacks", "paths"):
            merged[key] = cfg.get(key)
        merged.threads = cfg.get("threads", "auto")  # this evaluation's (pelab.threads)
        check_threads(merged.threads)
        if OmegaConf.select(merged, "logger.wandb") is not None:  # a W&B run of job type eval
            merged.logger.wandb.job_type = "eval"
        merged.paths.output_dir = str(output_dir)
        merged.ckpt_path = cfg.ckpt_path
        merged.test = True
    try:
        check_types(merged)
    except ConfigError as error:
        raise ConfigError(f"re-evaluating {train_cfg.pe._target_}: {error}") from None
    return merged


def check_evaluation(cfg: DictConfig) -> None:
    """A ``ConfigError`` for what ``evaluate`` would refuse before it tests, from the settings
    and the checkpoint's record alone: its options against the checkpoint's encoding, the
    lengths against its task, and the model rebuilt with them (no weights: the checked
    sweeper's check of an evaluation job)."""
    _, train_record = training_record(cfg.get("ckpt_path"))
    train_cfg = OmegaConf.create(train_record["config"])
    merged = eval_config(cfg, train_cfg, Path(cfg.paths.output_dir))
    build_model(merged, build_task(merged), trained_sizes(train_record, train_cfg))


def split_config(
    merged: DictConfig, train_cfg: DictConfig
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The record's ``config`` (what was evaluated: the training run's settings, with the
    evaluation's changes) and ``evaluation`` (how it ran: its own ``EVALUATION_KEYS``), so a
    table never shows the evaluation's defaults (``trainer.max_steps``) as the run's."""
    config = OmegaConf.to_container(merged, resolve=True)
    trained = OmegaConf.to_container(train_cfg, resolve=True)
    evaluation = {key: config.pop(key, None) for key in EVALUATION_KEYS}
    return config | {k: trained[k] for k in EVALUATION_KEYS if k in trained}, evaluation


def evaluate(cfg: DictConfig) -> dict[str, Any]:
    """Test ``cfg.ckpt_path`` on ``task.eval_lengths``; returns the record written to
    ``<run dir>/eval/<timestamp>_<pe overrides>/results.json``."""
    run_dir, train_record = training_record(cfg.get("ckpt_path"))
    train_cfg = OmegaConf.create(train_record["config"])
    changed = ",".join(f"{k}={v}" for k, v in pe_overrides(cfg).items()) or "as_trained"
    stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")
    output_dir = run_dir / "eval" / f"{stamp}_{changed}"
    merged = eval_config(cfg, train_cfg, output_dir)
    ckpt = Path(cfg.ckpt_path)
    if (hydra_dir := sweep_hydra_dir()) is not None:  # a sweep's job always writes its record
        link = hydra_dir / RESULTS
        link.unlink(missing_ok=True)
        link.symlink_to(output_dir / RESULTS)
    config, evaluation = split_config(merged, train_cfg)
    choices = {**train_record.get("choices", {}), "seed": merged.seed}
    fields = {
        "checkpoint": str(ckpt.resolve()),
        "eval_overrides": eval_overrides(cfg),
        "evaluation": evaluation,
    }
    with Recorder("eval", [Planned(output_dir, choices, config, fields)]) as recorder:
        sizes = trained_sizes(train_record, train_cfg)
        model = Preflight.evaluation(merged, sizes, ckpt).model  # a refusal writes no record
        recorder.started()
        notes: list[str] = []
        trainer = make_trainer(merged, run_loggers(merged, model.net.num_params(), notes))
        trainer.test(model, datamodule=data_module(merged, model.task), verbose=False)
        [record] = recorder.completed(lambda _: scored_outcome(merged, model, warnings=notes))
    return record


@sweep_task
def main(cfg: DictConfig) -> None:
    """One job of ``scripts/eval.py``: ``evaluate(cfg)``; its record is in
    ``<ckpt_path's run>/eval/``, if it got that far."""
    evaluate(cfg)
