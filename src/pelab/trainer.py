"""A run's Lightning ``Trainer``, built the same way for training and re-evaluation
(``make_trainer``): ``cfg.trainer`` with the configured callbacks, the loggers that could start,
and atomic checkpoint writes."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import lightning as L
from hydra.utils import instantiate
from lightning.pytorch.callbacks import LearningRateMonitor, ProgressBar
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.plugins.environments import SLURMEnvironment
from omegaconf import DictConfig, OmegaConf

from pelab.hydra_job import choices
from pelab.reliability.resume.checkpoints import AtomicCheckpointIO
from pelab.utils.console import interactive
from pelab.utils.wandb_mode import run_id, wandb_choice

log = logging.getLogger(__name__)


def make_trainer(
    cfg: DictConfig, loggers: list[Any], callbacks: Sequence[L.Callback] = ()
) -> L.Trainer:
    """``cfg.trainer`` with the configured callbacks (plus ``callbacks``), ``loggers`` (none: a
    stack's members log to their own afterwards, ``pelab.member_log``) and atomic checkpoint
    writes. In a SLURM job Lightning's own requeue is off at the source
    (``SLURMEnvironment(auto_requeue=False)``): it would answer ``SIGUSR1`` by writing an
    ``hpc_ckpt_N.ckpt`` that it then restores over the weights pelab chose before every later
    ``fit``/``test``; pelab's requeue (``pelab.reliability.cluster.requeue``) writes none."""
    bar = {} if interactive() else {"enable_progress_bar": False}  # a pipe: no \r lines
    slurm = [SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else []
    return instantiate(
        cfg.trainer,
        callbacks=[*configured_callbacks(cfg, logged=bool(loggers)), *callbacks],
        logger=loggers or False,
        plugins=[AtomicCheckpointIO(), *slurm],
        **bar,
    )


def run_loggers(
    cfg: DictConfig, params: dict[str, int], notes: list[str], say_mode: bool = True
) -> list[Any]:
    """The loggers ``cfg`` configures that could start (``working_loggers``)."""
    loggers = [
        instantiate(c, **wandb_run(c)) if is_wandb(c) else instantiate(c)
        for c in (cfg.get("logger") or {}).values()
        if c is not None and "_target_" in c
    ]
    return working_loggers(loggers, cfg, params, notes, say_mode)


def is_wandb(logger: DictConfig) -> bool:
    return logger._target_.endswith("WandbLogger")


def wandb_run(logger: DictConfig) -> dict[str, str]:
    """The W&B run a ``WandbLogger`` joins, as ``wandb.init`` arguments: the id its run
    directory keeps (``pelab.utils.wandb_mode.run_id``), so a resumed run continues its W&B run,
    unless ``logger.wandb.id`` is set."""
    return {} if logger.get("id") else {"id": run_id(logger.save_dir), "resume": "allow"}


def instantiate_all(section: DictConfig | None) -> list[Any]:
    """Instantiate each entry with a ``_target_`` (callbacks, loggers); skip null entries."""
    if not section:
        return []
    return [instantiate(c) for c in section.values() if c is not None and "_target_" in c]


def configured_callbacks(cfg: DictConfig, logged: bool = True) -> list[L.Callback]:
    """``cfg.callbacks``, instantiated; without the progress bar when
    ``trainer.enable_progress_bar=false`` or the output is no terminal, and without the
    learning-rate monitor when nothing is ``logged`` (Lightning refuses either callback then)."""
    callbacks = instantiate_all(cfg.get("callbacks"))
    if not cfg.trainer.get("enable_progress_bar", True) or not interactive():
        callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
    if not logged:
        callbacks = [c for c in callbacks if not isinstance(c, LearningRateMonitor)]
    return callbacks


def working_loggers(
    loggers: list[Any],
    cfg: DictConfig,
    params: dict[str, int],
    notes: list[str],
    say_mode: bool = True,
) -> list[Any]:
    """The loggers that could start (a W&B run starts here, at its first call): one that fails,
    e.g. W&B without a network in online mode, is dropped with a note, and the run goes on with
    its local ``results.json`` and checkpoints (a W&B run's id: ``wandb_run``). ``say_mode``:
    whether to say W&B's mode and why (once per job: a stack's members start a W&B run each)."""
    hparams = {
        **OmegaConf.to_container(cfg, resolve=True),
        "params": params,
        "choices": choices(cfg),
    }
    working = []
    if say_mode and any(isinstance(logger, WandbLogger) for logger in loggers):
        mode, why = wandb_choice()
        configured = OmegaConf.select(cfg, "logger.wandb.mode", default=mode)
        log.info(
            "W&B: %s mode (%s)", configured, why if configured == mode else "logger.wandb.mode"
        )
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            # Lightning 2.6 passes anonymous=None to wandb.init unconditionally, and W&B
            # warns about any value since wandb/wandb#10909; no public argument avoids it
            logger._wandb_init.pop("anonymous", None)
        try:
            logger.log_hyperparams(hparams)
        except Exception as error:  # a logger's failure must not cost the run
            note = f"{type(logger).__name__} failed to start and was dropped: {error!r}"
            log.warning(note)
            notes.append(note)
        else:
            working.append(logger)
    return working
