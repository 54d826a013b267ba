"""Where a job's time went (issue 53, item 4): ``PhaseTimes``, a callback on the Trainer's
hooks, sums the seconds of each phase of this attempt of a job, and every member's record keeps
them as ``time_split_s``:

- ``startup``: from the job's start (``Preflight.training``: checks, the model, the data) to its
  first training step (or, with ``train=false``, to its test);
- ``training`` (and ``steps``, how many): the training steps (each batch's forward, backward
  and optimizer step, from ``on_train_batch_start`` to ``on_train_batch_end``);
- ``validation`` (and ``validations``, how many): the validation loops, their checkpoint and
  criterion callbacks included;
- ``test``: the final test of every evaluation length.

The rest of the record's ``wall_time_s`` is Lightning's loop between them and the record's own
writing. A resumed job's split is its last attempt's (``wall_time_parts_s`` has each attempt's
wall time).
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L


class PhaseTimes(L.Callback):
    """Seconds per phase of one attempt of a job, from ``started`` (``time.perf_counter()`` at
    the job's start)."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.seconds = {"startup": None, "training": 0.0, "validation": 0.0, "test": 0.0}
        self.validations = 0
        self.steps = 0
        self._since: dict[str, float] = {}

    def _begin(self, phase: str) -> None:
        now = time.perf_counter()
        if self.seconds["startup"] is None:
            self.seconds["startup"] = now - self.started
        self._since[phase] = now

    def _end(self, phase: str) -> None:
        since = self._since.pop(phase, None)
        if since is not None:
            self.seconds[phase] += time.perf_counter() - since

    def on_train_batch_start(self, *args: Any, **kwargs: Any) -> None:
        self._begin("training")

    def on_train_batch_end(self, *args: Any, **kwargs: Any) -> None:
        self._end("training")
        self.steps += 1

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.validations += 1
            self._begin("validation")

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._end("validation")

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._begin("test")

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._end("test")

    def split(self) -> dict[str, float | int | None]:
        """``{"startup", "training", "steps", "validation", "validations", "test"}``, seconds
        rounded to the hundredth (``startup`` None when nothing ran)."""
        rounded = {k: None if v is None else round(v, 2) for k, v in self.seconds.items()}
        return {**rounded, "steps": self.steps, "validations": self.validations}
