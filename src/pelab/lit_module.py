"""The LightningModule: answer-only loss, AdamW with warmup + cosine decay, per-length metrics."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric

from pelab.metrics import METRICS, SELECTION_KEY, Scores, logged_values, mean_key, selection_score
from pelab.model_kinds import ModelKind
from pelab.positions import ContiguousPositions, PositionSampler
from pelab.tasks.base import Task

log = logging.getLogger(__name__)


class CompiledOrEager:
    """``torch.compile(fn)``, falling back to ``fn`` itself, with one warning, the first time
    compiling fails (e.g. TorchInductor's ``CppCompileError`` when the machine's compiler cannot
    build the generated kernel): the run goes on eagerly, with the same function. An error of
    ``fn`` itself is raised again by the eager call. ``failed`` holds the compile error."""

    def __init__(self, fn: Callable[..., Tensor]) -> None:
        self.fn, self.compiled = fn, torch.compile(fn)
        self.failed: str | None = None

    def __call__(self, *args: Any) -> Tensor:
        if self.failed is None:
            try:
                return self.compiled(*args)
            except Exception as error:  # compiling failed: torch.compile has no narrower type
                self.failed = f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
                log.warning(
                    "model.compile=true: torch.compile failed (%s); training goes on without "
                    "compiling (set model.compile=false to skip the attempt)",
                    self.failed,
                )
        return self.fn(*args)


def warmup_cosine(warmup_steps: int, total_steps: int, min_ratio: float) -> Callable[[int], float]:
    """LR multiplier: linear warmup to 1, then cosine decay to ``min_ratio`` at ``total_steps``."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


class SequenceModel(L.LightningModule):
    """Trains ``net`` on ``task`` in the sequences of its model ``kind`` (``pelab.model_kinds``).

    Each validation and test epoch scores every ``pelab.metrics.METRICS`` per evaluation
    length; ``scores[split]`` keeps the last epoch's ``{length: {metric: value}}`` of each split
    (``val``, ``test``), and the loggers get them with their in- and out-of-distribution means
    (``pelab.metrics.logged_values``). ``positions`` is the run's position sampler
    (``pelab.positions.build_sampler``).
    """

    def __init__(
        self,
        net: nn.Module,
        kind: ModelKind,
        task: Task,
        optimizer: Callable[..., torch.optim.Optimizer],
        warmup_steps: int = 100,
        min_lr_ratio: float = 0.1,
        positions: PositionSampler | None = None,
        compile: bool = False,
        val_lengths: list[int] | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.net, self.kind, self.task, self.seed = net, kind, task, seed
        # ``compile``: the training forward goes through torch.compile (the module's parameters
        # and checkpoints are unchanged); greedy evaluation stays eager (one token per step
        # would recompile for every new shape)
        self.train_logits = CompiledOrEager(kind.answer_logits) if compile else kind.answer_logits
        self.positions = positions or ContiguousPositions()
        self.optimizer_factory = optimizer
        self.warmup_steps, self.min_lr_ratio = warmup_steps, min_lr_ratio
        self.metrics = nn.ModuleDict(
            {
                _state(metric, length): MeanMetric()
                for metric in METRICS
                for length in task.eval_lengths
            }
        )
        self.scores: dict[str, Scores] = {}
        # the lengths each split scores, in the order of its data loaders
        self.lengths = {
            "val": list(task.eval_lengths if val_lengths is None else val_lengths),
            "test": list(task.eval_lengths),
        }

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        prompt, answer = batch
        positions = self.training_positions(prompt, answer.shape[1], self.global_step)
        loss = self.loss(prompt, answer, positions)
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/length", float(prompt.shape[1]))
        return loss

    def loss(self, prompt: Tensor, answer: Tensor, positions: Tensor) -> Tensor:
        """The mean cross-entropy of the teacher-forced answer tokens."""
        logits = self.train_logits(self.net, prompt, answer, positions)  # [b, m, vocab]
        return F.cross_entropy(logits.flatten(0, 1).float(), answer.flatten())

    def training_positions(self, prompt: Tensor, answer_length: int, step: int) -> Tensor:
        """The positions of training step ``step``: like its batch (``TrainBatches``), a pure
        function of ``(seed, step)``, so a resumed run or a member of a stack
        (``pelab.members``) draws what the uninterrupted single run draws."""
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + step + 7_919)
        return self.sequence_positions(prompt, answer_length, generator)

    def sequence_positions(
        self, prompt: Tensor, answer_length: int, generator: torch.Generator | None = None
    ) -> Tensor:
        """Positions of the canonical sequence ``BOS prompt SEP answer``,
        ``[b|1, n + m + 2(, k)]``, from the run's sampler."""
        b, n = prompt.shape
        return self.positions(b, n, answer_length, generator, prompt.device)

    def _evaluate(
        self, split: str, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int
    ) -> None:
        length = self.lengths[split][dataloader_idx]
        correct = self.correct(batch["prompt"], batch["answer"], length, batch_idx)
        self.metrics[_state("exact_match", length)].update(correct.all(dim=-1).float())
        self.metrics[_state("token_acc", length)].update(correct.float().mean(dim=-1))

    def correct(self, prompt: Tensor, answer: Tensor, length: int, batch_idx: int) -> Tensor:
        """Which greedy answer tokens are right, ``[b, m]``, for batch ``batch_idx`` of an
        evaluation set at ``length`` (its positions are a pure function of ``(length,
        batch_idx)``: the same every epoch, and for ``pelab.load_run``)."""
        generator = torch.Generator().manual_seed(length * 100_003 + batch_idx)
        positions = self.sequence_positions(prompt, answer.shape[1], generator)
        return self.kind.predict(self.net, prompt, answer.shape[1], positions) == answer

    def validation_step(
        self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._evaluate("val", batch, batch_idx, dataloader_idx)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self._evaluate("test", batch, batch_idx, dataloader_idx)

    def epoch_scores(self, split: str) -> dict[str, float]:
        """End an epoch of ``split``: its scores into ``scores[split]`` (the running states
        reset); returns the values to log (``pelab.metrics.logged_values``)."""
        scores: Scores = {length: {} for length in self.lengths[split]}
        for metric in METRICS:
            for length in self.lengths[split]:
                state = self.metrics[_state(metric, length)]
                scores[length][metric] = float(state.compute())
                state.reset()
        self.scores[split] = scores
        values = logged_values(split, scores, self.task.in_distribution)
        if split == "val":
            in_distribution = self.task.in_distribution
            values[SELECTION_KEY] = selection_score(scores, in_distribution, self.task.n_val)
        return values

    def _log_epoch(self, split: str) -> None:
        shown = mean_key(split, "id", "exact_match")
        for key, value in self.epoch_scores(split).items():
            self.log(key, value, prog_bar=key == shown)

    def on_validation_epoch_end(self) -> None:
        self._log_epoch("val")

    def on_test_epoch_end(self) -> None:
        self._log_epoch("test")

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """The last validation's scores go with the weights: a run resumed at its final step
        (killed during its test) has no validation left to run, and records them from here."""
        if "val" in self.scores:
            checkpoint[SCORES_KEY] = {"val": self.scores["val"]}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        saved = (checkpoint.get(SCORES_KEY) or {}).get("val")
        if saved is not None and "val" not in self.scores:  # never over this run's own
            self.scores["val"] = {int(n): dict(v) for n, v in saved.items()}

    def configure_optimizers(self):  # noqa: ANN201 (Lightning's union of return types)
        optimizer = self.optimizer_factory(self.net.parameters())
        return self.scheduled(optimizer, self.trainer.max_steps)

    def scheduled(self, optimizer: torch.optim.Optimizer, total_steps: int) -> dict[str, Any]:
        """``optimizer`` with the warmup + cosine schedule over ``total_steps``, stepped every
        step, as ``configure_optimizers`` returns it."""
        schedule = warmup_cosine(self.warmup_steps, total_steps, self.min_lr_ratio)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }


SCORES_KEY = "pelab_scores"  # the last validation's scores in a checkpoint


def _state(metric: str, length: int) -> str:
    """The name of a metric's running state (a ``ModuleDict`` key: no dots or slashes)."""
    return f"{metric}_len{length}"
