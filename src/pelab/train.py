"""Training entry point: ``train(cfg)`` builds everything from the Hydra config and runs it;
``run(cfg)`` executes it through ``pelab.runner`` so that every run leaves a ``results.json``,
success or failure. ``build_task`` and ``build_model`` are shared with re-evaluation."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from pelab import pe as _pe  # noqa: F401  (registers the encodings)
from pelab import tasks as _tasks  # noqa: F401  (registers the tasks)
from pelab.competence import LearnedStop, budget_outcome, check_budget, validation_lengths
from pelab.errors import ConfigError
from pelab.lit_module import SequenceModel
from pelab.model_kinds import get_model_kind
from pelab.models.encoder_decoder import EncoderDecoder
from pelab.models.transformer import Transformer
from pelab.positions import build_sampler
from pelab.record import RESULTS, is_stack
from pelab.reliability.callbacks import ResumeState, exit_status_on_sigterm
from pelab.reliability.checkpoints import check_compatible, identity, read_checkpoint, resume_path
from pelab.reliability.completed import completed_record
from pelab.reliability.data import ResumableTaskData
from pelab.reliability.memory import check_eval_memory
from pelab.reliability.validate import check_types
from pelab.runner import Outcome, choices, execute, make_trainer, outcome, sweep_job
from pelab.tasks import TASK_REGISTRY
from pelab.tasks.base import Task

log = logging.getLogger(__name__)


def build_task(cfg: DictConfig) -> Task:
    return instantiate(cfg.task, _partial_=True)()  # called outside Hydra: errors unwrapped


def build_model(cfg: DictConfig, task: Task, sizes: dict[str, int] | None = None) -> SequenceModel:
    """The LightningModule for ``cfg`` (validates every shape and length before training).

    ``sizes``: the ``max_len`` and ``train_max_len`` the model is built with (re-evaluation
    passes those of the training run, from its ``model_dims``); default: this run's longest
    sequence (and the sampler's largest position) and its longest training sequence.
    """
    kind = get_model_kind(cfg.model.kind)
    positions = build_sampler(instantiate(cfg.positions), task)
    sizes = sizes or {
        "max_len": max(task.max_sequence_length(), positions.max_position),
        "train_max_len": task.max_train_sequence_length(),
    }
    check_digit_tokens(cfg, task)
    # called outside Hydra, so configuration errors reach the user unwrapped
    build_net = instantiate(cfg.model.net, _partial_=True)
    net: Transformer | EncoderDecoder = build_net(
        vocab_size=task.vocab_size,
        max_len=sizes["max_len"],
        train_max_len=sizes["train_max_len"],
        pe=instantiate(cfg.pe),
        position_dims=task.position_dims,
        digit_tokens=task.digit_tokens,
        **kind.net_options,  # the model kind's structure, e.g. causal or not
    )
    return SequenceModel(
        net,
        kind,
        task,
        optimizer=instantiate(cfg.model.optimizer),
        positions=positions,
        compile=cfg.model.get("compile", False),
        val_lengths=validation_lengths(task, cfg.get("learned_at")),
        seed=cfg.seed,
        **cfg.model.schedule,
    )


def check_digit_tokens(cfg: DictConfig, task: Task) -> None:
    """A ``ConfigError`` when the encoding indexes the digits of numbers (``pe=abacus``) and the
    task declares no digit tokens (``Task.digit_tokens``), naming the tasks that declare them."""
    encoding = get_class(cfg.pe._target_)
    if encoding.needs_digit_tokens and not task.digit_tokens:
        having = sorted(name for name, cls in TASK_REGISTRY.items() if cls.digit_tokens)
        raise ConfigError(
            f"pe={encoding.pe_name} indexes the digits within each number, but "
            f"task={task.task_name} declares no digit tokens (Task.digit_tokens) with these "
            f"settings; tasks that declare them (some only in some settings, see docs/tasks.md): "
            f"{', '.join(having)}"
        )


def data_module(cfg: DictConfig, task: Task) -> ResumableTaskData:
    """Training batches and the cached evaluation sets of ``task`` (training and re-evaluation
    read the same sets)."""
    return ResumableTaskData(
        task,
        batch_size=cfg.data.batch_size,
        num_batches=cfg.trainer.max_steps,
        seed=cfg.seed,
        eval_batch_size=cfg.data.eval_batch_size,
        cache_dir=cfg.paths.cache_dir,
        val_lengths=validation_lengths(task, cfg.get("learned_at")),
        length_sampling=cfg.data.get("length_sampling", "uniform"),
    )


def check_training(cfg: DictConfig) -> None:
    """A ``ConfigError`` for a setting no training run can use (types, the budget)."""
    check_types(cfg)
    if cfg.trainer.max_steps < 1:
        raise ConfigError(
            f"trainer.max_steps must be >= 1, got {cfg.trainer.max_steps}: pelab trains by steps, "
            "with a fresh batch every step (epochs have no meaning here)"
        )
    check_budget(cfg.get("learned_at"), cfg.get("learned_patience", 2))


def train(cfg: DictConfig) -> Outcome:
    """Fit, then test on every evaluation length.

    Every setting is checked before training. The run resumes exactly from
    ``resume_path(cfg)`` (``ckpt_path``, or with ``resume=true`` the newest checkpoint already in
    its output directory) once that checkpoint is known to come from the same settings.
    """
    check_training(cfg)
    L.seed_everything(cfg.seed, workers=True)
    torch.set_float32_matmul_precision("high")
    task = build_task(cfg)
    model = build_model(cfg, task)
    check_eval_memory(cfg, task, model)
    ckpt_path = resume_path(cfg) if cfg.train else None
    if ckpt_path is not None:
        check_compatible(read_checkpoint(ckpt_path), cfg, model, ckpt_path)
    datamodule = data_module(cfg, task)
    notes: list[str] = []
    callbacks: list[L.Callback] = [ResumeState(identity(cfg))]
    stop = None
    if cfg.get("learned_at") is not None:
        stop = LearnedStop(cfg.learned_at, cfg.get("learned_patience", 2))
        callbacks.append(stop)
    trainer = make_trainer(cfg, model.net.num_params(), notes, callbacks)
    with exit_status_on_sigterm():
        if cfg.train:
            trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
        if cfg.test:
            best = getattr(trainer.checkpoint_callback, "best_model_path", "") or None
            trainer.test(
                model, datamodule=datamodule, ckpt_path=best, verbose=False, weights_only=True
            )
    resumed = None if ckpt_path is None else str(ckpt_path)
    return outcome(
        cfg, model, resumed_from=resumed, warnings=notes, competence=budget_outcome(stop)
    )


def run(cfg: DictConfig) -> dict[str, Any] | list[dict[str, Any]]:
    """``train`` inside its run record (``results.json``, always, atomically), with the
    per-length table, and ``wandb.finish()`` so the next job of a multirun opens its own W&B run.
    With ``skip_completed=true`` a completed record of the same config is returned untrained.
    ``seeds=[...]`` and/or ``learning_rates=[...]``: one member per seed and learning rate in one
    step (``pelab.members``), a record each."""
    if is_stack(cfg):
        from pelab.members import run as run_members  # members build on this module

        return run_members(cfg)
    if cfg.get("skip_completed") and (done := completed_record(cfg)) is not None:
        return done
    config = OmegaConf.to_container(cfg, resolve=True)
    return execute("train", cfg.paths.output_dir, choices(cfg), config, lambda: train(cfg))


def job(cfg: DictConfig) -> None:
    """One job of ``scripts/train.py``: ``run(cfg)``, a failure in a sweep recorded and the
    sweep going on (``runner.sweep_job``)."""
    sweep_job(lambda: run(cfg), Path(cfg.paths.output_dir) / RESULTS)
