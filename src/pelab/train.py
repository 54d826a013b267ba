"""Training entry point, one path for every run: a run is a stack of K >= 1 members
(``pelab.members``; a plain run is K = 1) trained as one network (``pelab.lit_module``).

``train(cfg)`` builds everything from the Hydra config (``pelab.assembly``), fits the members
and tests each on its best checkpoint; ``run(cfg)`` executes it through ``pelab.runner`` so that
every member leaves a ``results.json``, success or failure."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf

from pelab.assembly import build_members, build_task, check_training, data_module
from pelab.competence import LearnedStop, budget_outcome
from pelab.lit_module import SequenceModel
from pelab.members import check_learning_rates, member_configs
from pelab.record import (
    MEMBER_KEYS,
    RESULTS,
    earlier_wall_times,
    is_stack,
    new_record,
    write_json_atomic,
)
from pelab.reliability import requeue
from pelab.reliability.callbacks import BestCheckpoints, ResumeState, exit_status_on_sigterm
from pelab.reliability.checkpoints import check_compatible, identity, read_checkpoint, resume_path
from pelab.reliability.completed import completed_record
from pelab.reliability.lock import run_lock
from pelab.reliability.memory import check_eval_memory
from pelab.reliability.slurm import peak_rss_mb
from pelab.runner import (
    Outcome,
    checked,
    choices,
    execute,
    instantiate_all,
    make_trainer,
    scored_outcome,
    sweep_job,
    working_loggers,
)
from pelab.threads import configure_threads

log = logging.getLogger(__name__)


@dataclass
class Fitted:
    """A trained (and tested) run: its members' model, their criterion and notes."""

    model: SequenceModel
    stop: LearnedStop | None
    resumed_from: str | None
    resumed_from_step: int | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class Prepared:
    """A run that passed every check: its members' model and the checkpoint it resumes from."""

    configs: list[DictConfig]
    model: SequenceModel
    ckpt_path: Path | None
    ckpt_step: int | None


def prepare(cfg: DictConfig, configs: Sequence[DictConfig] | None = None) -> Prepared:
    """Check every setting and build the members ``configs`` (default: ``member_configs(cfg)``):
    a ``ConfigError`` here refuses the run before any work. The run resumes exactly from
    ``resume_path(cfg)`` (``ckpt_path``, or with ``resume=true`` the newest checkpoint already in
    its output directory) once that checkpoint is known to come from the same settings."""
    configs = member_configs(cfg) if configs is None else list(configs)
    check_training(cfg)
    L.seed_everything(cfg.seed, workers=True)
    torch.set_float32_matmul_precision("high")
    task = build_task(cfg)
    model = build_members(configs, task)
    model.live = not is_stack(cfg)
    configure_threads(cfg, model.net.num_params()["total"] * len(configs))
    check_eval_memory(cfg, task, model)
    ckpt_path = resume_path(cfg) if cfg.train else None
    step = None
    if ckpt_path is not None:
        checkpoint = read_checkpoint(ckpt_path)
        check_compatible(checkpoint, cfg, model, ckpt_path)
        step = checkpoint.get("global_step")
        log.info("resuming from step %s (checkpoint %s)", step, ckpt_path)
    return Prepared(configs, model, ckpt_path, step)


def train(
    cfg: DictConfig,
    configs: Sequence[DictConfig] | None = None,
    prepared: Prepared | None = None,
) -> Fitted:
    """Fit the members (``prepare(cfg, configs)`` unless ``prepared``), then test each on every
    evaluation length with the weights of its best validation."""
    prepared = prepared or prepare(cfg, configs)
    configs, model, ckpt_path = prepared.configs, prepared.model, prepared.ckpt_path
    best = BestCheckpoints(
        [Path(c.paths.output_dir) / "checkpoints" / "best.ckpt" for c in configs],
        [identity(c) for c in configs],
    )
    callbacks: list[L.Callback] = [best, ResumeState(identity(cfg))]
    stop = None
    if cfg.get("learned_at") is not None:
        stop = LearnedStop(cfg.learned_at, cfg.get("learned_patience", 2))
        callbacks.append(stop)
    resumed = None if ckpt_path is None else str(ckpt_path)
    fitted = Fitted(model, stop, resumed, prepared.ckpt_step)
    params = model.net.num_params()
    trainer = make_trainer(cfg, params, fitted.notes, callbacks, loggers=model.live)
    if not model.live:
        log.info(
            "training %d members (%s) as one stacked network",
            len(configs),
            ", ".join(f"{k}={cfg[k]}" for k in MEMBER_KEYS if cfg.get(k) is not None),
        )
    data = data_module(cfg, model.task, model.seeds)
    with exit_status_on_sigterm():
        if cfg.train:
            trainer.fit(model, datamodule=data, ckpt_path=ckpt_path, weights_only=True)
        if cfg.test:
            best.load_best(model)
            trainer.test(model, datamodule=data, verbose=False)
    return fitted


def member_outcome(fitted: Fitted, k: int, cfg: DictConfig) -> Outcome:
    """Member ``k``'s outcome; a member of a stack replays its history (training, validation,
    test) to its own loggers first."""
    model = fitted.model
    notes = list(fitted.notes)
    if not model.live:
        params = model.net.num_params()
        for logger in working_loggers(instantiate_all(cfg.get("logger")), cfg, params, notes):
            for step, values in model.history[k]:
                logger.log_metrics(values, step)
            logger.finalize("success")
    return scored_outcome(
        cfg,
        model,
        member=k,
        resumed_from=fitted.resumed_from,
        resumed_from_step=fitted.resumed_from_step,
        warnings=notes,
        competence=budget_outcome(fitted.stop, k),
    )


def run(cfg: DictConfig) -> dict[str, Any] | list[dict[str, Any]]:
    """``train`` inside each member's run record (``results.json``, always, atomically: it says
    ``running`` from the start, and ``completed`` or ``failed`` with the error at the end), with
    the per-length table, and ``wandb.finish()`` so the next job of a multirun opens its own W&B
    run. A plain run returns its record; ``seeds=[...]`` and/or ``learning_rates=[...]`` a list,
    one per member (each in ``record.member_dir``, naming its stack in ``member_of``). With
    ``skip_completed=true`` completed records of the same config are returned untrained."""
    configs, stack = member_configs(cfg), is_stack(cfg)
    requeue.started()
    if cfg.get("skip_completed"):
        done = [completed_record(m) for m in configs]
        if all(r is not None for r in done):
            requeue.finished()
            return done if stack else done[0]
    # one writer per run directory, for the run's life (a second job waits or is refused)
    with run_lock(cfg.paths.output_dir, cfg.get("run_lock_wait_s") or 0):
        try:
            return _run(cfg, configs, stack)
        finally:  # every record is written: SLURM's requeue signal is ignored from here on
            requeue.finished()


def _run(
    cfg: DictConfig, configs: list[DictConfig], stack: bool
) -> dict[str, Any] | list[dict[str, Any]]:
    """``run`` once the run directory is this process's."""
    extra: dict[str, Any] = {}
    if stack:
        rates = cfg.get("learning_rates")
        extra["member_of"] = {
            "seeds": list(dict.fromkeys(m.seed for m in configs)),
            "learning_rates": None if rates is None else check_learning_rates(rates),
            "dir": str(cfg.paths.output_dir),
        }
    containers = [OmegaConf.to_container(m, resolve=True) for m in configs]
    start = time.perf_counter()
    prepared = checked(lambda: prepare(cfg, configs))  # a refusal writes no record
    # the times of the attempts a resume continues (the records below replace theirs)
    earlier = [earlier_wall_times(Path(m.paths.output_dir) / RESULTS) for m in configs]
    for member, config in zip(configs, containers, strict=True):
        record = new_record("train", choices(member), config) | extra
        write_json_atomic(Path(member.paths.output_dir) / RESULTS, record)
    fitted: Fitted | BaseException
    try:
        if isinstance(prepared, Exception):
            raise prepared
        fitted = train(cfg, configs, prepared)
    except BaseException as error:  # every member's record says why
        fitted = error
    if stack:  # the members' shared training time
        extra["member_of"]["fit_time_s"] = round(time.perf_counter() - start, 1)
    # this process's peak memory: what its next SLURM job asks (pelab.reliability.slurm)
    extra["peak_rss_mb"] = peak_rss_mb()
    records, failure = [], None
    for k, (member, config) in enumerate(zip(configs, containers, strict=True)):

        def work(k: int = k, member: DictConfig = member) -> Outcome:
            if isinstance(fitted, BaseException):
                raise fitted
            return member_outcome(fitted, k, member)

        try:
            records.append(
                execute(
                    "train",
                    member.paths.output_dir,
                    choices(member),
                    config,
                    work,
                    since=start,
                    earlier=earlier[k],
                    **extra,
                )
            )
        except BaseException as error:
            failure = failure or error
    if failure is not None:
        raise failure
    return records if stack else records[0]


def job(cfg: DictConfig) -> None:
    """One job of ``scripts/train.py``: ``run(cfg)``, a failure in a sweep recorded and the
    sweep going on (``runner.sweep_job``)."""
    sweep_job(lambda: run(cfg), Path(cfg.paths.output_dir) / RESULTS)
