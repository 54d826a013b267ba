"""Where a job's training starts and the checkpoints it leaves, decided once before any trainer
exists: ``Resume``.

A job starts from scratch or from a checkpoint (``resume_path``): the ``ckpt_path`` given, or
with ``resume=true`` (the default) the ``last`` checkpoint of its directory (``run_checkpoint``),
into which the requeue checkpoints Lightning may have left are folded first
(``adopt_requeue_checkpoints``).
That checkpoint is read and checked against the job (``checkpoints.read_checkpoint``,
``checkpoints.check_compatible``) before any work; a job from scratch forgets its directories'
W&B run ids (``pelab.utils.wandb_mode.forget_run_id``). Its training then writes, through the
callbacks ``Resume`` holds, each member's ``best.ckpt`` (``BestCheckpoints``) and the job's
identity and RNG state into every checkpoint (``ResumeState``); ``Resume.fit`` trains and
hands back each member's best weights for the test."""

from __future__ import annotations

import logging
import os
import re
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
from omegaconf import DictConfig
from torch import nn

from pelab.reliability.resume.callbacks import BestCheckpoints, ResumeState, Tested
from pelab.reliability.resume.checkpoints import check_compatible, identity, read_checkpoint
from pelab.utils.wandb_mode import forget_run_id

log = logging.getLogger(__name__)

HPC_CHECKPOINT = re.compile(r"hpc_ckpt_(\d+)\.ckpt")  # Lightning's (adopt_requeue_checkpoints)


@dataclass(frozen=True)
class Resume:
    """Where a job's training starts: the checkpoint at ``path``, written at ``step``, or from
    scratch (both ``None``); ``identity``: the job's ``checkpoints.identity``, which that
    checkpoint matched and which every checkpoint of this training carries (``state`` writes
    it); ``best``: what writes and reads each member's best weights."""

    path: Path | None
    step: int | None
    identity: dict[str, Any]
    best: BestCheckpoints
    state: ResumeState

    @property
    def callbacks(self) -> list[L.Callback]:
        """The training's callbacks that write its checkpoints."""
        return [self.best, self.state]

    @classmethod
    def chosen(
        cls,
        cfg: DictConfig,
        model: nn.Module,
        run_dirs: Sequence[Path],
        identities: Sequence[dict[str, Any]],
    ) -> Resume:
        """Where the job of ``cfg`` (its ``model``; its runs' directories ``run_dirs``, whose
        ``checkpoints.identity`` are ``identities``) starts, chosen before any trainer can
        restore a requeue checkpoint: a ``ConfigError`` for a checkpoint it may not start from
        (unreadable, of other settings or other shapes)."""
        adopt_requeue_checkpoints(cfg.paths.output_dir)
        path = resume_path(cfg) if cfg.train else None
        step = None if path is None else start_step(path, cfg, model)
        best = BestCheckpoints([run_checkpoint(d, "best") for d in run_dirs], list(identities))
        job = identity(cfg)
        if cfg.train and path is None:  # from scratch: not an earlier attempt's W&B run
            for run_dir in run_dirs:
                forget_run_id(run_dir)
        return cls(path, step, job, best, ResumeState(job))

    @property
    def resumed_from(self) -> str | None:
        """The record's ``resumed_from``: the checkpoint's path, ``None`` from scratch."""
        return None if self.path is None else str(self.path)

    def fit(
        self,
        trainer: L.Trainer,
        model: L.LightningModule,
        data: L.LightningDataModule,
        *,
        train: bool,
        test: bool,
    ) -> list[Tested]:
        """``trainer.fit`` from here when ``train`` (``weights_only``: tensors and plain
        containers only); then, when ``test``, each member's best weights loaded into ``model``
        (``BestCheckpoints.load_best``), which it returns: what the test scores."""
        if train:
            with resuming_in_place(self.path):
                trainer.fit(model, datamodule=data, ckpt_path=self.path, weights_only=True)
        return self.best.load_best(model) if test else []


def start_step(path: Path, cfg: DictConfig, model: nn.Module) -> int | None:
    """The step of the checkpoint at ``path``, once it is known to come from the settings of
    ``cfg`` and to fit ``model`` (``checkpoints.check_compatible``)."""
    checkpoint = read_checkpoint(path)
    check_compatible(checkpoint, cfg, model, path)
    step = checkpoint.get("global_step")
    log.info("resuming from step %s (checkpoint %s)", step, path)
    return step


def run_checkpoint(run_dir: str | Path, name: str) -> Path:
    """``<run_dir>/checkpoints/<name>.ckpt``. ``last``: saved at every validation, on SIGTERM
    and on SLURM's requeue signal, what a re-run in ``run_dir`` resumes from; ``best``: a run's
    weights at its best validation (``BestCheckpoints``), which its test, ``eval.py`` and
    ``load_run`` read."""
    return Path(run_dir) / "checkpoints" / f"{name}.ckpt"


def adopt_requeue_checkpoints(output_dir: str | Path) -> None:
    """Fold Lightning's SLURM requeue checkpoints (``hpc_ckpt_N.ckpt``, written by pelab before
    2026-11-28 or by Lightning's own requeue handler) left in ``output_dir`` into ``last.ckpt``:
    the newest by step becomes ``last.ckpt`` when it is newer, every other is removed (an older
    state of the same directory). Called before any trainer starts: on SLURM, Lightning restores
    the newest ``hpc_ckpt_N`` of its ``default_root_dir`` before every ``fit``, ``validate`` or
    ``test`` called without a checkpoint, over the weights pelab chose (issue 42: a requeued
    run tested the weights of the signal, recorded as completed)."""
    root = Path(output_dir)
    found = sorted(p for p in root.glob("hpc_ckpt_*.ckpt") if HPC_CHECKPOINT.fullmatch(p.name))
    if not found:
        return
    last = run_checkpoint(root, "last")
    steps = {p: read_checkpoint(p).get("global_step", 0) for p in found}
    newest = max(found, key=steps.get)
    last_step = read_checkpoint(last).get("global_step", 0) if last.is_file() else None
    for path in found:
        if path == newest and (last_step is None or steps[path] > last_step):
            last.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, last)
            log.info("requeue checkpoint %s (step %d) is now %s", path.name, steps[path], last)
        else:
            path.unlink()
            log.info(
                "removed requeue checkpoint %s (step %d): %s is as new",
                path.name,
                steps[path],
                last,
            )


def resume_path(cfg: DictConfig) -> Path | None:
    """The checkpoint this run starts from: ``ckpt_path`` as given; for ``ckpt_path=last`` or
    (with ``resume=true``) none given, the run directory's ``last`` checkpoint if there is one."""
    ckpt_path = cfg.get("ckpt_path")
    if ckpt_path not in (None, "last"):
        return Path(ckpt_path)
    if ckpt_path is None and not cfg.get("resume", False):
        return None
    last = run_checkpoint(cfg.paths.output_dir, "last")
    if not last.is_file():
        if ckpt_path == "last":
            log.warning(
                "ckpt_path=last: no checkpoint in %s yet, training from scratch",
                cfg.paths.output_dir,
            )
        return None
    return last


@contextmanager
def resuming_in_place(ckpt_path: str | Path | None) -> Iterator[None]:
    """Without Lightning's warning "Checkpoint directory <it> exists and is not empty" for the
    directory of ``ckpt_path``, which a run resuming from its own ``last.ckpt`` finds as it
    left it; a directory any other run finds full (one from scratch, or resuming from
    elsewhere) is still warned about."""
    with warnings.catch_warnings():
        if ckpt_path is not None:
            directory = os.path.realpath(Path(ckpt_path).parent)  # as ModelCheckpoint says it
            message = f"Checkpoint directory {re.escape(directory)} exists and is not empty"
            warnings.filterwarnings("ignore", message)
        yield
