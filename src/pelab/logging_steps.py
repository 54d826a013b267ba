"""Which training steps the loggers write, as Lightning decides it: what a stack's members
record (``pelab.member_log``) and when a non-finite loss is checked
(``pelab.reliability.resume.callbacks.StopOnNonFiniteLoss``)."""

from __future__ import annotations

import lightning as L


def logging_step(trainer: L.Trainer | None, step: int) -> bool:
    """Whether training step ``step`` (from 0) logs, as Lightning's loggers decide after its
    callbacks: every ``trainer.log_every_n_steps``-th, and a step where the trainer stops
    (``ValidateLastStep``'s last step off the interval, SIGTERM); so a member's history has its
    single run's steps. False without a trainer."""
    n = 0 if trainer is None else trainer.log_every_n_steps
    return n > 0 and ((step + 1) % n == 0 or trainer.should_stop)
