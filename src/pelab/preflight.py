"""What a job checks and sets up before any work, training (``pelab.train``) and re-evaluation
(``pelab.evaluate``) alike: ``Preflight``, the job's model once it passed. A ``ConfigError``
here refuses the job before it writes a record.

Both seed every generator, build the model, choose torch's threads for it
(``pelab.threads``), check that evaluating the longest length fits in memory
(``pelab.reliability.checks.memory``) and say how long the test will take
(``pelab.eval_time``). Training first checks every setting and the GPU it asks for, and lets
CUDA run float32 matmuls in TF32 (``docs/encodings.md``); re-evaluation rebuilds the trained
model and loads its weights, checked to fit."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import torch
from omegaconf import DictConfig

from pelab.assembly import build_model, build_task, check_gpu_present, check_training
from pelab.eval_time import check_test_time
from pelab.lit_module import SequenceModel
from pelab.members import Job
from pelab.reliability.checks.memory import check_eval_memory
from pelab.sizing import built, trained_parameters
from pelab.tasks.base import Task
from pelab.threads import configure_threads
from pelab.trained import load_weights


@dataclass(frozen=True)
class Preflight:
    """A job that passed every check before its work: its ``model`` and when it ``started``
    (``time.perf_counter()``: the start of its start-up, ``pelab.phase_times``)."""

    model: SequenceModel
    started: float

    @classmethod
    def training(cls, job: Job) -> Preflight:
        """The job's members, built and checked for training."""
        started = time.perf_counter()
        cfg = job.config
        check_training(cfg)
        check_gpu_present(cfg.trainer)
        L.seed_everything(cfg.seed, workers=True)
        torch.set_float32_matmul_precision("high")
        task, model = built(job)
        return cls.checked(cfg, task, model, trained_parameters(job, model), started)

    @classmethod
    def evaluation(cls, cfg: DictConfig, sizes: dict[str, int], ckpt: Path) -> Preflight:
        """The checkpoint's model, rebuilt with the evaluation's settings ``cfg`` and the sizes
        it was trained with, checked to fit its weights."""
        started = time.perf_counter()
        L.seed_everything(cfg.seed, workers=True)
        task = build_task(cfg)
        model = build_model(cfg, task, sizes)
        load_weights(model, ckpt)
        total = model.net.num_params()["total"]
        return cls.checked(cfg, task, model, total, started, "the evaluation")

    @classmethod
    def checked(
        cls,
        cfg: DictConfig,
        task: Task,
        model: SequenceModel,
        parameters: int,
        started: float,
        test: str = "the final test",
    ) -> Preflight:
        """``model``, once torch's threads are chosen for its ``parameters`` and its test
        (called ``test``) is known to fit in memory and said how long it takes."""
        configure_threads(cfg, parameters)
        check_eval_memory(cfg, task, model)
        if cfg.test:  # said before the hours of training
            check_test_time(model, task, cfg.data.eval_batch_size, test)
        return cls(model, started)
