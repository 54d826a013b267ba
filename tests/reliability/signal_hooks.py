"""Test hooks that send this process SIGUSR1 at a chosen moment of a job, outside Lightning's
loops: ``SignalAtJob`` (a Hydra callback: before the run starts, or after every record is
written) and ``SignalOnFitEnd`` (a Lightning callback: after training, before the test)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback as HydraCallback
from lightning.pytorch.callbacks import Callback


def _send(marker: str | None) -> None:
    """SIGUSR1 to this process; with a ``marker``, once (a requeued job's second run goes on)."""
    if marker:
        if Path(marker).exists():
            return
        Path(marker).write_text(str(time.time()))
    os.kill(os.getpid(), signal.SIGUSR1)
    time.sleep(0.2)  # the handler has run (it runs between bytecodes of the main thread)


class SignalAtJob(HydraCallback):
    def __init__(self, moment: str, marker: str | None = None) -> None:
        self.moment, self.marker = moment, marker

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        if self.moment == "start":
            _send(self.marker)

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        if self.moment == "end":
            _send(self.marker)


class SignalOnFitEnd(Callback):
    def __init__(self, marker: str | None = None) -> None:
        self.marker = marker

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        _send(self.marker)
