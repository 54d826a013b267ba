"""The one run executor: a training run (``pelab.train``) and a re-evaluation of a checkpoint
(``pelab.evaluate``) both go through ``execute``, so both leave the same ``results.json``
(``pelab.record``), print the same table, build their trainer and loggers the same way, score
chance levels on the same test sets, and close their W&B run with their outcome."""

from __future__ import annotations

import functools
import json
import logging
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import lightning as L
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from lightning.pytorch.callbacks import LearningRateMonitor, ProgressBar
from lightning.pytorch.loggers import WandbLogger
from omegaconf import DictConfig, OmegaConf

from pelab.chance import eval_chance
from pelab.errors import ConfigError, causes
from pelab.lit_module import SequenceModel
from pelab.metrics import Scores, summary
from pelab.record import (
    CHOICE_GROUPS,
    COMPLETED,
    RESULTS,
    SWEEP_RESUMES,
    ended_status,
    new_record,
    recorded,
    resume_command,
    sweep_overrides,
    sweep_resume_command,
)
from pelab.reliability.checkpoints import AtomicCheckpointIO
from pelab.tasks.base import Task
from pelab.utils.console import interactive, route_console
from pelab.utils.report import print_results
from pelab.utils.wandb_mode import run_id, wandb_choice
from pelab.wandb_finish import finish_wandb

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """What a finished run hands to its record: the task, the scores of each split, the chance
    levels of the test sets, the model's sizes, and notes."""

    task: Task
    scores: dict[str, Scores]
    chance: Scores | None
    params: dict[str, int]
    model_dims: dict[str, Any]
    checkpoint: str | None = None  # training: the file its test scores come from
    checkpoint_step: int | None = None  # and that file's training step
    resumed_from: str | None = None
    resumed_from_step: int | None = None
    warnings: list[str] = field(default_factory=list)
    competence: dict[str, Any] | None = None  # training: pelab.competence.competence_fields
    attention: dict[str, str] | None = None  # the kernel and dtype it ran (pelab.kernels)


def in_sweep() -> bool:
    """Whether this process runs a job of a Hydra sweep (``-m``)."""
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def sweep_job_dir() -> Path | None:
    """The Hydra directory of this job of a sweep; None outside a sweep."""
    return Path(HydraConfig.get().runtime.output_dir) if in_sweep() else None


def sweep_task(job: Callable[[DictConfig], Any]) -> Callable[[DictConfig], None]:
    """A job of a script (``scripts/train.py``, ``scripts/eval.py``), as the Lightning-Hydra
    template's ``task_wrapper``: a single run's failure propagates (exit status 1), and a single
    run ``refused`` before any work leaves no directory behind (Hydra's, when it holds nothing
    else); in a sweep (``-m``) a failed job is recorded (its ``results.json`` says ``failed`` and
    why, if it got that far; its log has the traceback) and the sweep goes on. The console shows
    the run's own lines (``pelab.utils.console``)."""

    @functools.wraps(job)
    def wrapped(cfg: DictConfig) -> None:
        route_console()
        hydra_dir = hydra_output_dir()
        fresh = hydra_dir is not None and _fresh(hydra_dir)
        try:
            job(cfg)
        except Exception as error:
            if not in_sweep():
                if fresh and refused(error):
                    shutil.rmtree(hydra_dir, ignore_errors=True)  # nothing ran
                    remove_empty_parents(hydra_dir, Path.cwd())
                raise
            log.exception("this job failed (its results.json says why); the sweep goes on")

    return wrapped


def remove_empty_parents(path: Path, stop: Path) -> None:
    """Remove the directories above ``path`` that are empty (``logs/eval/runs``, made for a run
    that was refused), up to ``stop``, which stays, as does every directory outside it."""
    stop = stop.resolve()
    for parent in path.resolve().parents:
        if parent == stop or stop not in parent.parents:
            return
        try:
            parent.rmdir()  # only an empty directory
        except OSError:
            return


def hydra_output_dir() -> Path | None:
    """This process's Hydra directory (its log, ``.hydra/``); None outside a Hydra app."""
    if not HydraConfig.initialized():
        return None
    directory = OmegaConf.select(HydraConfig.get(), "runtime.output_dir", default=None)
    return None if directory is None else Path(directory)


def _fresh(job: Path) -> bool:
    """Whether the Hydra directory ``job`` holds nothing but what Hydra wrote for this process
    (its log, ``.hydra/``)."""
    return job.is_dir() and all(p.name == ".hydra" or p.suffix == ".log" for p in job.iterdir())


def refused(error: BaseException) -> bool:
    """Whether ``error`` refuses a single run before any work: a ``ConfigError`` (or one caused
    by it) from the checks before training or evaluation (``checked``). Such a run writes no
    record and leaves no directory: the one-line error says it all. A sweep's job records it
    like any failure, so the sweep's summary says why."""
    return not in_sweep() and any(isinstance(e, ConfigError) for e in causes(error))


Checked = TypeVar("Checked")


def checked(checks: Callable[[], Checked]) -> Checked | Exception:
    """``checks()``, run before a job writes its record: a refusal (``refused``) propagates and
    leaves nothing behind; any other error is returned, for the job's record to say."""
    try:
        return checks()
    except Exception as error:
        if refused(error):
            raise
        return error


def execute(
    job_type: str,
    output_dir: str | Path,
    choices: dict[str, Any],
    config: dict[str, Any],
    work: Callable[[], Outcome],
    since: float | None = None,
    earlier: list[float] | None = None,
    job_dir: str | Path | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Run ``work`` inside its record: ``results.json`` in ``output_dir`` is written on entry
    (``running``), and on exit ``completed`` with the outcome or ``failed`` with the error (which
    is re-raised); the per-length table is printed and the W&B run is closed either way.
    ``since``: the ``time.perf_counter()`` the record's ``wall_time_s`` counts from (default:
    now; a member of a run counts from the run's start); ``earlier``: the wall times of the
    attempts a resumed training run continues (``record.earlier_wall_times``); ``job_dir``: the
    directory of the job a member's run belongs to (default: ``output_dir``). An interrupted
    training run records and logs the command that resumes it (``record.resume_command``)."""
    record = new_record(job_type, choices, config) | extra
    resume = None
    if job_type == "train":
        resume = interrupted_resume(job_type, job_dir or output_dir)
    try:
        with recorded(Path(output_dir) / RESULTS, record, since, resume, earlier):
            try:
                outcome = work()
            except BaseException as error:
                if job_type == "train":
                    record["stop_reason"] = ended_status(error)
                raise
            task = outcome.task
            record.update(
                status=COMPLETED,
                metrics=summary(outcome.scores, task.in_distribution, outcome.chance),
                train_lengths=list(task.train_lengths),
                params=outcome.params,
                model_dims=outcome.model_dims,
            )
            if outcome.competence is not None:
                record.update(outcome.competence)
            if outcome.checkpoint is not None:
                record["checkpoint"] = outcome.checkpoint
                record["checkpoint_step"] = outcome.checkpoint_step
            if outcome.attention is not None:
                record["attention"] = outcome.attention
            if outcome.resumed_from is not None:
                record["resumed_from"] = outcome.resumed_from
                record["resumed_from_step"] = outcome.resumed_from_step
            if outcome.warnings:
                record["warnings"] = outcome.warnings
        return record
    finally:
        finish_wandb(record, Path(output_dir) / RESULTS)
        if record["status"] == COMPLETED:  # the console's last lines: after W&B's
            try:
                print_results(record, outcome.task)
            except Exception:  # the record is written: a table's fault must not fail the run
                log.exception("could not print the results table (results.json has them)")


def interrupted_resume(job_type: str, job_dir: str | Path) -> str:
    """What resumes an interrupted run: its own command, or in a sweep the whole sweep's (a
    Ctrl-C stops the sweep, so the jobs not started yet need it too); ``record.resume_command``,
    ``record.sweep_resume_command``."""
    if not HydraConfig.initialized():
        return resume_command(job_type, [], job_dir)
    hydra = HydraConfig.get()
    multirun = Path(str(hydra.sweep.dir)) / "multirun.yaml" if in_sweep() else None
    if multirun is not None and multirun.exists():
        script = f"scripts/{job_type}.py"
        sweep = sweep_overrides(OmegaConf.load(multirun))
        command = sweep_resume_command(script, *sweep, hydra.sweep.dir)
        return f"{command} (the whole sweep: {SWEEP_RESUMES})"
    return resume_command(job_type, list(hydra.overrides.task), job_dir)


def scored_outcome(
    cfg: DictConfig, model: SequenceModel, member: int = 0, **notes: Any
) -> Outcome:
    """The outcome of ``member`` of a model whose test (``cfg.test``) has run: its scores, and
    the chance level of each metric on the very test sets it was scored on."""
    task = model.task
    chance = eval_chance(task, "test", task.n_test, cfg.paths.cache_dir) if cfg.test else None
    return Outcome(
        task=task,
        scores=dict(model.member_scores[member]),
        chance=chance,
        params=model.net.num_params(),
        model_dims=json.loads(json.dumps(asdict(model.net.dims))),  # as results.json holds it
        **notes,
    )


def make_trainer(
    cfg: DictConfig,
    params: dict[str, int],
    notes: list[str],
    callbacks: Sequence[L.Callback] = (),
    loggers: bool = True,
) -> L.Trainer:
    """``cfg.trainer`` with the configured callbacks (plus ``callbacks``), the loggers that could
    start (none with ``loggers=False``: a stack's members log to their own afterwards), and
    atomic checkpoint writes."""
    configured = instantiate_all(cfg.get("logger")) if loggers else []
    loggers = working_loggers(configured, cfg, params, notes)
    bar = {} if interactive() else {"enable_progress_bar": False}  # a pipe: no \r lines
    return instantiate(
        cfg.trainer,
        callbacks=[*configured_callbacks(cfg, logged=bool(loggers)), *callbacks],
        logger=loggers or False,
        plugins=[AtomicCheckpointIO()],
        **bar,
    )


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
    loggers: list[Any], cfg: DictConfig, params: dict[str, int], notes: list[str]
) -> list[Any]:
    """The loggers that could start (a W&B run starts here, at its first call): one that fails,
    e.g. W&B without a network in online mode, is dropped with a note, and the run goes on with
    its local ``results.json`` and checkpoints. A W&B run takes the id its run directory keeps
    (``pelab.utils.wandb_mode.run_id``): a resumed run continues its W&B run."""
    hparams = {
        **OmegaConf.to_container(cfg, resolve=True),
        "params": params,
        "choices": choices(cfg),
    }
    working = []
    if any(isinstance(logger, WandbLogger) for logger in loggers):  # say which mode, and why
        mode, why = wandb_choice()
        configured = OmegaConf.select(cfg, "logger.wandb.mode", default=mode)
        log.info(
            "W&B: %s mode (%s)", configured, why if configured == mode else "logger.wandb.mode"
        )
    for logger in loggers:
        if isinstance(logger, WandbLogger):  # Lightning passes anonymous=None: W&B warns
            logger._wandb_init.pop("anonymous", None)
            if not logger._wandb_init.get("id"):  # unless logger.wandb.id is set
                logger._wandb_init.update(id=run_id(logger.save_dir), resume="allow")
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
    return {**{k: picked.get(k) for k in CHOICE_GROUPS}, "seed": cfg.seed}
