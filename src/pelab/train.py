"""Training entry point: ``train(cfg)`` builds everything from the Hydra config and runs it;
``run(cfg)`` wraps it so that every run leaves a ``results.json``, success or failure."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from pelab import pe as _pe  # noqa: F401  (registers the encodings)
from pelab import tasks as _tasks  # noqa: F401  (registers the tasks)
from pelab.chance import chance_means, eval_chance
from pelab.errors import ConfigError
from pelab.layouts import get_layout
from pelab.lit_module import SequenceModel
from pelab.models.encoder_decoder import EncoderDecoder
from pelab.models.transformer import Transformer
from pelab.reliability.callbacks import ResumeState, exit_status_on_sigterm
from pelab.reliability.checkpoints import (
    AtomicCheckpointIO,
    check_compatible,
    identity,
    read_checkpoint,
    resume_path,
)
from pelab.reliability.completed import completed_record
from pelab.reliability.data import ResumableTaskData
from pelab.reliability.memory import check_eval_memory
from pelab.reliability.validate import check_types
from pelab.tasks.base import Task
from pelab.utils.report import print_results
from pelab.utils.results import recorded, summarize

log = logging.getLogger(__name__)


def build_task(cfg: DictConfig) -> Task:
    return instantiate(cfg.task, _partial_=True)()  # called outside Hydra: errors unwrapped


def build_model(cfg: DictConfig, task: Task) -> SequenceModel:
    """The LightningModule for ``cfg`` (validates every shape and length before training)."""
    layout = get_layout(cfg.model.kind)
    positions = instantiate(cfg.positions)
    positions.check(task.max_sequence_length(), task.position_dims)
    # called outside Hydra, so configuration errors reach the user unwrapped
    build_net = instantiate(cfg.model.net, _partial_=True)
    net: Transformer | EncoderDecoder = build_net(
        vocab_size=task.vocab_size,
        max_len=max(task.max_sequence_length(), positions.max_position),
        pe=instantiate(cfg.pe),
        position_dims=task.position_dims,
        **layout.net_options,  # the model kind's structure, e.g. causal or not
    )
    return SequenceModel(
        net,
        layout,
        task,
        optimizer=instantiate(cfg.model.optimizer),
        positions=positions,
        compile=cfg.model.get("compile", False),
        **cfg.model.schedule,
    )


def _instantiate_dict(section: DictConfig | None) -> list[Any]:
    """Instantiate each entry with a ``_target_`` (callbacks, loggers); skip null entries."""
    if not section:
        return []
    return [instantiate(c) for c in section.values() if c is not None and "_target_" in c]


def train(cfg: DictConfig) -> dict[str, Any]:
    """Fit, then test on every evaluation length; returns the run's metrics and sizes.

    Every setting is checked before training. The run resumes exactly from
    ``resume_path(cfg)`` (``ckpt_path``, or with ``resume=true`` the newest checkpoint already in
    its output directory) once that checkpoint is known to come from the same settings.
    """
    check_types(cfg)
    L.seed_everything(cfg.seed, workers=True)
    torch.set_float32_matmul_precision("high")
    if cfg.trainer.max_steps < 1:
        raise ConfigError(
            f"trainer.max_steps must be >= 1, got {cfg.trainer.max_steps}: pelab trains by steps, "
            "with a fresh batch every step (epochs have no meaning here)"
        )
    task = build_task(cfg)
    model = build_model(cfg, task)
    check_eval_memory(cfg, task, model)
    ckpt_path = resume_path(cfg) if cfg.train else None
    if ckpt_path is not None:
        check_compatible(read_checkpoint(ckpt_path), cfg, model, ckpt_path)
    datamodule = ResumableTaskData(
        task,
        batch_size=cfg.data.batch_size,
        num_batches=cfg.trainer.max_steps,
        seed=cfg.seed,
        eval_batch_size=cfg.data.eval_batch_size,
        cache_dir=cfg.paths.cache_dir,
    )
    params = model.net.num_params()
    notes: list[str] = []
    loggers = _working_loggers(_instantiate_dict(cfg.get("logger")), cfg, params, notes)
    callbacks = [*_instantiate_dict(cfg.get("callbacks")), ResumeState(identity(cfg))]
    trainer: L.Trainer = instantiate(
        cfg.trainer, callbacks=callbacks, logger=loggers or False, plugins=[AtomicCheckpointIO()]
    )
    with exit_status_on_sigterm():
        if cfg.train:
            trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
        if cfg.test:
            best = getattr(trainer.checkpoint_callback, "best_model_path", "") or None
            trainer.test(
                model, datamodule=datamodule, ckpt_path=best, verbose=False, weights_only=True
            )
    out = {"metrics": dict(model.final_metrics), "params": params, "task": task}
    if cfg.test:  # the chance level of each metric on the very test sets scored above
        out["chance"] = eval_chance(task, "test", task.n_test, cfg.paths.cache_dir)
    if ckpt_path is not None:
        out["resumed_from"] = str(ckpt_path)
    if notes:
        out["warnings"] = notes
    return out


def _working_loggers(
    loggers: list[Any], cfg: DictConfig, params: dict[str, int], notes: list[str]
) -> list[Any]:
    """The loggers that could start (a W&B run starts here, at its first call): one that fails,
    e.g. W&B without a network in online mode, is dropped with a note, and the run goes on with
    its local ``results.json`` and checkpoints."""
    hparams = {
        **OmegaConf.to_container(cfg, resolve=True),
        "params": params,
        "choices": choices(cfg),
    }
    working = []
    for logger in loggers:
        try:
            logger.log_hyperparams(hparams)
        except Exception as error:  # a logger's failure must not cost the run
            note = f"{type(logger).__name__} failed to start and was dropped: {error!r}"
            log.warning(note)
            notes.append(note)
        else:
            working.append(logger)
    return working


def choices(cfg: DictConfig) -> dict[str, Any]:
    """The config-group choices of this run (model, pe, task, ...) and its seed."""
    picked = dict(HydraConfig.get().runtime.choices) if HydraConfig.initialized() else {}
    keep = ("model", "pe", "task", "positions", "trainer", "experiment")
    return {**{k: picked.get(k) for k in keep}, "seed": cfg.seed}


def run(cfg: DictConfig) -> dict[str, Any]:
    """``train`` plus bookkeeping: ``results.json`` (always, atomically), the per-length table,
    and ``wandb.finish()`` so the next job of a multirun opens its own W&B run."""
    if cfg.get("skip_completed") and (done := completed_record(cfg)) is not None:
        return done
    record: dict[str, Any] = {
        "status": "running",
        "choices": choices(cfg),
        "config": OmegaConf.to_container(cfg, resolve=True),
    }
    try:
        with recorded(Path(cfg.paths.output_dir) / "results.json", record):
            out = train(cfg)
            record.update(
                status="completed",
                metrics=summarize(out["metrics"]),
                train_lengths=list(out["task"].train_lengths),
                params=out["params"],
                **{k: out[k] for k in ("resumed_from", "warnings") if k in out},
            )
            if "chance" in out:
                record["metrics"]["chance"] = out["chance"]
                record["metrics"].update(chance_means(out["chance"], out["task"]))
            print_results(record, out["task"])
        return record
    finally:
        _finish_wandb(record)


def _finish_wandb(record: dict[str, Any]) -> None:
    """Close this job's W&B run with its outcome, which ``make_table.py wandb:<project>`` reads:
    ``status``, ``error`` and the command-line ``overrides`` in the summary, and exit code 1
    for a failure (W&B then shows the run as failed)."""
    import wandb

    if wandb.run is None:
        return
    overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    chance = {
        f"{split}/{metric}": value
        for split in ("chance_id", "chance_ood")
        for metric, value in record.get("metrics", {}).get(split, {}).items()
    }
    wandb.run.summary.update(
        {
            "status": record["status"],
            "error": record.get("error", ""),
            "overrides": overrides,
            **chance,  # beside test/id/* and test/ood/*
        }
    )
    wandb.finish(exit_code=0 if record["status"] == "completed" else 1)
