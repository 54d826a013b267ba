"""The learning-rate schedule: linear warmup, then a cosine decay to a floor over the run
(``trainer.max_steps``), or with ``decay_at`` a constant rate until each member's own decay."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch


def cosine(progress: float, min_ratio: float) -> float:
    """``min_ratio + (1 - min_ratio) (1 + cos(pi p)) / 2`` at ``p = min(progress, 1)``: 1 at
    ``p = 0``, ``min_ratio`` from ``p = 1`` on."""
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def warmup_cosine(
    warmup_steps: int, total_steps: int | None, min_ratio: float
) -> Callable[[int], float]:
    """LR multiplier: linear warmup to 1, then cosine decay to ``min_ratio`` at ``total_steps``
    (None: stay at 1, the stable phase of ``decay_at``)."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        if total_steps is None:
            return 1.0
        return cosine((step - warmup_steps) / max(1, total_steps - warmup_steps), min_ratio)

    return factor


def scheduled(optimizer: torch.optim.Optimizer, factor: Callable[[int], float]) -> dict[str, Any]:
    """``optimizer`` with its learning rate times ``factor(step)``, stepped every step, as
    ``LightningModule.configure_optimizers`` returns it."""
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
