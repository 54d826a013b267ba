"""Where a job's members log, decided here once per job (``pelab.members.Job.live``): a job that
streams live sends its one member's values to the trainer's loggers as it trains; a stack
buffers each member's in its ``MemberState.history`` and replays it to the member's own loggers
(its own W&B run) once training ends. The caller asks the same way either way (``trainer_loggers``,
``replay``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from torch import Tensor

from pelab.member_state import MemberState
from pelab.metrics import mean_key

log = logging.getLogger(__name__)

# under ``decay_at``: each member's learning-rate factor (the optimizer's, ``lr-AdamW``, holds)
DECAY_KEY = "train/lr_decay"


class MemberLog:
    """The logging sink of ``members``: ``live`` (one member only) or buffered in each
    member's ``history``, (step, {logger key: value}) of each logged step and validation."""

    def __init__(self, members: list[MemberState], live: bool) -> None:
        if live and len(members) != 1:
            raise ValueError(f"a job of {len(members)} members cannot stream to one live run")
        self.live, self.members = live, members

    def trainer_loggers(self, loggers: Callable[[], list[Any]]) -> list[Any]:
        """The trainer's loggers: ``loggers()`` (the job's) when live, else none."""
        if self.live:
            return loggers()
        log.info(
            "training %d members as one stacked network: each logs to its own loggers once "
            "training ends",
            len(self.members),
        )
        return []

    def replay(self, k: int, loggers: Callable[[], list[Any]]) -> None:
        """Member ``k``'s history to ``loggers()`` (its own), once its training ended; a live
        member logged as it went."""
        if self.live:
            return
        for logger in loggers():
            for step, values in self.members[k].history:
                logger.log_metrics(values, step)
            logger.finalize("success")

    def training_step(
        self,
        module: L.LightningModule,
        step: int,
        losses: dict[int, Tensor],
        lengths: dict[int, int],
        decay: list[float] | None,
    ) -> None:
        """A logging step's losses (on the device) and batch lengths, per member, and each
        member's learning-rate ``decay`` (under ``decay_at``)."""
        if self.live:
            module.log("train/loss", losses[0])  # no host read here: Lightning's, at logging
            module.log("train/length", float(lengths[0]))
            if decay is not None:
                module.log(DECAY_KEY, decay[0])
            return
        module.log("train/loss", torch.stack(list(losses.values())).mean())  # the progress bar's
        for k, loss in losses.items():
            values = {"train/loss": float(loss), "train/length": lengths[k]}
            if decay is not None:
                values[DECAY_KEY] = decay[k]
            self.members[k].history.append((step, values))

    def epoch(
        self, module: L.LightningModule, split: str, scored: dict[int, dict[str, float]]
    ) -> None:
        """The end of an epoch of ``split``: the values each scored member logs (a stack's
        progress bar shows how many members its validation scored, those still training)."""
        if self.live:
            shown = mean_key(split, "id", "exact_match")
            for values in scored.values():  # its one member's, unless it stopped
                for key, value in values.items():
                    module.log(key, value, prog_bar=key == shown)
            return
        for k, values in scored.items():
            self.members[k].history.append((module.global_step, values))
        if split == "val":
            module.log("val/members_active", float(len(scored)), prog_bar=True)
