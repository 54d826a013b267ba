"""Each member's optimization in a stack (``pelab.lit_module.SequenceModel``'s part): one
optimizer over every member's weights with warmup + cosine decay (``pelab.schedule``), each
member's step at its own learning rate and decay, stopped members held, each member's gradient
clipped by its own norm (``pelab.models.member_steps``)."""

from __future__ import annotations

import logging
from typing import Any

import torch

from pelab.models.member_steps import clip_member_norms, scale_member_steps
from pelab.schedule import cosine, scheduled, warmup_cosine

log = logging.getLogger(__name__)


class MemberOptimization:
    """The optimization hooks of a LightningModule of K >= 1 members. It reads the module's
    ``net``, ``seeds``, ``learning_rates`` (None: the optimizer's own), ``stopped``,
    ``member_scores``, ``task``, ``optimizer_factory``, ``warmup_steps``, ``min_lr_ratio``,
    ``decay_at``, ``decay_steps`` and keeps ``decay_from`` (per member: the step its decay
    began, None before)."""

    def start_decay(self, k: int) -> None:
        """Member ``k``'s decay begins at this step once the exact match at its worst
        in-distribution length reaches ``decay_at`` (``member_rates`` then applies it)."""
        if self.decay_at is None or self.decay_from[k] is not None:
            return
        scores = self.member_scores[k]["val"]
        worst = min(v["exact_match"] for n, v in scores.items() if self.task.in_distribution(n))
        if worst >= self.decay_at:
            self.decay_from[k] = self.global_step
            log.info(
                "seed %d: in-distribution exact match %.3f >= decay_at %g at step %d: the "
                "learning rate decays over the next %d steps",
                self.seeds[k],
                worst,
                self.decay_at,
                self.global_step,
                self.decay_steps,
            )

    def decay(self, k: int) -> float:
        """Member ``k``'s learning-rate factor under ``decay_at``: 1 until its decay began, then
        a cosine to ``min_lr_ratio`` over ``decay_steps`` steps."""
        start = self.decay_from[k]
        if start is None:
            return 1.0
        return cosine((self.global_step - start) / self.decay_steps, self.min_lr_ratio)

    def configure_optimizers(self):  # noqa: ANN201 (Lightning's union of return types)
        """The optimizer over every member's weights (elementwise updates: each member's steps
        are its single run's), at the members' learning rate, or at the largest of
        ``learning_rates`` with the others scaled in ``optimizer_step``; the warmup + cosine
        schedule to ``trainer.max_steps``, or with ``decay_at`` warmup and a constant rate (each
        member's decay is its own, in ``member_rates``)."""
        options = {} if self.learning_rates is None else {"lr": max(self.learning_rates)}
        optimizer = self.optimizer_factory(self.net.parameters(), **options)
        total = None if self.decay_at else self.trainer.max_steps
        return scheduled(optimizer, warmup_cosine(self.warmup_steps, total, self.min_lr_ratio))

    def member_rates(self) -> list[float] | None:
        """Each member's step as a fraction of the optimizer's: 0 once stopped, its learning
        rate over the largest, times its ``decay``; None when every member takes the
        optimizer's step. Host numbers: deciding reads nothing from the device."""
        rates = [0.0 if s else self.decay(k) for k, s in enumerate(self.stopped)]
        if self.learning_rates is not None:
            top = max(self.learning_rates)
            rates = [r * lr / top for r, lr in zip(rates, self.learning_rates, strict=True)]
        return None if all(r == 1 for r in rates) else rates

    def optimizer_step(
        self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None
    ) -> None:
        """The optimizer's step, each member's part of it scaled by ``member_rates`` (an
        optimizer whose step is proportional to its learning rate, as SGD's, Adam's and AdamW's
        are, thus steps member ``k`` at ``learning_rates[k]``)."""
        rates = self.member_rates()
        if rates is None:
            optimizer.step(closure=optimizer_closure)
            return
        before = [p.detach().clone() for p in self.net.parameters()]
        optimizer.step(closure=optimizer_closure)
        scale_member_steps(self.net, before, rates)

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip each member's gradient by its own norm, as its single run clips it."""
        if gradient_clip_val is None or len(self.seeds) == 1 or gradient_clip_algorithm == "value":
            self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
            return
        clip_member_norms(self.net, gradient_clip_val)
