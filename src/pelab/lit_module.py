"""The LightningModule: answer-only loss, AdamW with warmup + cosine decay, per-length metrics."""

from __future__ import annotations

import math
from collections.abc import Callable

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric

from pelab.layouts import Layout
from pelab.positions import ContiguousPositions, RandomizedPositions
from pelab.tasks.base import Task

METRICS = ("exact_match", "token_acc")


def warmup_cosine(warmup_steps: int, total_steps: int, min_ratio: float) -> Callable[[int], float]:
    """LR multiplier: linear warmup to 1, then cosine decay to ``min_ratio`` at ``total_steps``."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


class SequenceModel(L.LightningModule):
    """Trains ``net`` on ``task`` in the ``layout`` of its model kind.

    Metrics per evaluation length ``L``, for splits ``val`` and ``test``:
    ``{split}/exact_match/len_{L}`` (the whole greedy answer right) and
    ``{split}/token_acc/len_{L}`` (share of greedy answer tokens right), plus their means over
    in-distribution (``{split}/id/...``) and out-of-distribution (``{split}/ood/...``) lengths.
    """

    def __init__(
        self,
        net: nn.Module,
        layout: Layout,
        task: Task,
        optimizer: Callable[..., torch.optim.Optimizer],
        warmup_steps: int = 100,
        min_lr_ratio: float = 0.1,
        positions: ContiguousPositions | RandomizedPositions | None = None,
        compile: bool = False,
    ) -> None:
        super().__init__()
        self.net, self.layout, self.task = net, layout, task
        # ``compile``: the training forward goes through torch.compile (the module's parameters
        # and checkpoints are unchanged); greedy evaluation stays eager (one token per step
        # would recompile for every new shape)
        self.train_logits = (
            torch.compile(layout.answer_logits) if compile else layout.answer_logits
        )
        self.positions = positions or ContiguousPositions()
        self.optimizer_factory = optimizer
        self.warmup_steps, self.min_lr_ratio = warmup_steps, min_lr_ratio
        self.metrics = nn.ModuleDict(
            {
                _key(metric, length): MeanMetric()
                for metric in METRICS
                for length in task.eval_lengths
            }
        )
        self.final_metrics: dict[str, float] = {}

    def forward(self, tokens: Tensor, positions: Tensor | None = None) -> Tensor:
        return self.net(tokens, positions)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        prompt, answer = batch
        positions = self.sequence_positions(prompt, answer.shape[1])
        logits = self.train_logits(self.net, prompt, answer, positions)  # [b, m, vocab]
        loss = F.cross_entropy(logits.flatten(0, 1).float(), answer.flatten())
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/length", float(prompt.shape[1]))
        return loss

    def sequence_positions(
        self, prompt: Tensor, answer_length: int, generator: torch.Generator | None = None
    ) -> Tensor | None:
        """Positions of the canonical sequence ``BOS prompt SEP answer`` (``n + m + 2`` tokens):
        the task's own coordinates when it has them (e.g. a grid's (row, col)), else the run's
        position sampler (``None``: contiguous ``0 .. n+m+1``)."""
        b, n = prompt.shape
        coordinates = self.task.coordinates(n, answer_length)  # [n + m + 2, k] or None
        if coordinates is not None:
            return coordinates[None].to(prompt.device)
        return self.positions(b, n + answer_length + 2, generator, prompt.device)

    def _evaluate(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int) -> None:
        prompt, answer = batch["prompt"], batch["answer"]
        length = self.task.eval_lengths[dataloader_idx]
        b, m = answer.shape
        # evaluation positions are a pure function of (length, batch): the same every epoch
        generator = torch.Generator().manual_seed(length * 100_003 + batch_idx)
        positions = self.sequence_positions(prompt, m, generator)
        correct = self.layout.predict(self.net, prompt, m, positions) == answer
        self.metrics[_key("exact_match", length)].update(correct.all(dim=-1).float())
        self.metrics[_key("token_acc", length)].update(correct.float().mean(dim=-1))

    def validation_step(
        self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._evaluate(batch, batch_idx, dataloader_idx)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self._evaluate(batch, batch_idx, dataloader_idx)

    def _log_epoch(self, split: str) -> None:
        values: dict[str, float] = {}
        for metric in METRICS:
            per_length = {}
            for length in self.task.eval_lengths:
                state = self.metrics[_key(metric, length)]
                per_length[length] = float(state.compute())
                state.reset()
                values[f"{split}/{metric}/len_{length}"] = per_length[length]
            for group, keep in (("id", True), ("ood", False)):
                chosen = [v for n, v in per_length.items() if self.task.in_distribution(n) == keep]
                if chosen:
                    values[f"{split}/{group}/{metric}"] = sum(chosen) / len(chosen)
        for key, value in values.items():
            self.log(key, value, prog_bar=key == f"{split}/id/exact_match")
        self.final_metrics.update(values)

    def on_validation_epoch_end(self) -> None:
        self._log_epoch("val")

    def on_test_epoch_end(self) -> None:
        self._log_epoch("test")

    def configure_optimizers(self):  # noqa: ANN201 (Lightning's union of return types)
        optimizer = self.optimizer_factory(self.net.parameters())
        schedule = warmup_cosine(self.warmup_steps, self.trainer.max_steps, self.min_lr_ratio)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }


def _key(metric: str, length: int) -> str:
    return f"{metric}_len{length}"
