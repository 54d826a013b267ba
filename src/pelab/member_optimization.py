"""Each member's optimization in a stack (``pelab.lit_module.SequenceModel``'s, which calls it
from its optimizer hooks): one optimizer over every member's weights with warmup + cosine decay
(``pelab.schedule``), each member's step at its own learning rate and decay, stopped members
held, each member's gradient clipped by its own norm (``pelab.models.member_steps``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import lightning as L
import torch
from torch import nn

from pelab.member_state import MemberState
from pelab.metrics import Scores
from pelab.models.member_steps import clip_member_norms, scale_member_steps
from pelab.schedule import cosine, scheduled, warmup_cosine

log = logging.getLogger(__name__)


class MemberOptimization:
    """The optimizer ``factory`` (AdamW's, say) over a stack's weights, ``warmup_steps`` of
    warmup, then a cosine to ``min_lr_ratio``: over the run's steps, or with ``decay_at`` over
    ``decay_steps`` steps from the validation where a member's in-distribution exact match
    reaches ``decay_at`` (each member's own, in ``MemberState.decay_from``)."""

    def __init__(
        self,
        factory: Callable[..., torch.optim.Optimizer],
        warmup_steps: int = 100,
        min_lr_ratio: float = 0.1,
        decay_at: float | None = None,
        decay_steps: int = 400,
    ) -> None:
        self.factory = factory
        self.warmup_steps, self.min_lr_ratio = warmup_steps, min_lr_ratio
        self.decay_at, self.decay_steps = decay_at, decay_steps

    def start_decay(
        self, member: MemberState, in_distribution: Callable[[int], bool], step: int
    ) -> None:
        """``member``'s decay begins at ``step`` once the exact match of its last validation at
        its worst in-distribution length reaches ``decay_at``."""
        if self.decay_at is None or member.decay_from is not None:
            return
        scores: Scores = member.scores["val"]
        worst = min(v["exact_match"] for n, v in scores.items() if in_distribution(n))
        if worst >= self.decay_at:
            member.decay_from = step
            log.info(
                "seed %d: in-distribution exact match %.3f >= decay_at %g at step %d: the "
                "learning rate decays over the next %d steps",
                member.seed,
                worst,
                self.decay_at,
                step,
                self.decay_steps,
            )

    def decay(self, member: MemberState, step: int) -> float:
        """``member``'s learning-rate factor under ``decay_at`` at ``step``: 1 until its decay
        began, then a cosine to ``min_lr_ratio`` over ``decay_steps`` steps."""
        if member.decay_from is None:
            return 1.0
        return cosine((step - member.decay_from) / self.decay_steps, self.min_lr_ratio)

    def configure(self, net: nn.Module, members: Sequence[MemberState], max_steps: int) -> Any:
        """The optimizer over every member's weights (elementwise updates: each member's steps
        are its single run's), at the members' learning rate, or at the largest of theirs with
        the others scaled in ``step``; the warmup + cosine schedule to ``max_steps``, or with
        ``decay_at`` warmup and a constant rate (each member's decay is its own)."""
        rates = [m.learning_rate for m in members]
        options = {} if None in rates else {"lr": max(rates)}
        optimizer = self.factory(net.parameters(), **options)
        total = None if self.decay_at else max_steps
        return scheduled(optimizer, warmup_cosine(self.warmup_steps, total, self.min_lr_ratio))

    def rates(self, members: Sequence[MemberState], step: int) -> list[float] | None:
        """Each member's step as a fraction of the optimizer's at ``step``: 0 once stopped, its
        learning rate over the largest, times its ``decay``; None when every member takes the
        optimizer's step. Host numbers: deciding reads nothing from the device."""
        rates = [0.0 if m.stopped else self.decay(m, step) for m in members]
        learning_rates = [m.learning_rate for m in members]
        if None not in learning_rates:
            top = max(learning_rates)
            rates = [r * lr / top for r, lr in zip(rates, learning_rates, strict=True)]
        return None if all(r == 1 for r in rates) else rates

    def step(
        self,
        net: nn.Module,
        optimizer: torch.optim.Optimizer,
        closure: Callable[[], Any] | None,
        members: Sequence[MemberState],
        step: int,
    ) -> None:
        """The optimizer's step, each member's part of it scaled by ``rates`` (an optimizer
        whose step is proportional to its learning rate, as SGD's, Adam's and AdamW's are, thus
        steps member ``k`` at its own learning rate)."""
        rates = self.rates(members, step)
        if rates is None:
            optimizer.step(closure=closure)
            return
        before = [p.detach().clone() for p in net.parameters()]
        optimizer.step(closure=closure)
        scale_member_steps(net, before, rates)

    def clip(
        self,
        module: L.LightningModule,
        optimizer: torch.optim.Optimizer,
        value: float | None,
        algorithm: str | None,
    ) -> None:
        """Clip the gradient of each member of ``module.net`` by its own norm at ``value``, as
        its single run clips it (Lightning's own clipping for one member or by value)."""
        if value is None or len(module.members) == 1 or algorithm == "value":
            module.clip_gradients(optimizer, value, algorithm)
            return
        clip_member_norms(module.net, value)
