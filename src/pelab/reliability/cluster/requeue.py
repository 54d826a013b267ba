"""SLURM's requeue signal (``SIGUSR1``, ``--signal=USR1@90``) handled for the whole job, from its
first line to its exit (issue 29, item 3).

Lightning answers the signal only inside ``fit``/``test``; anywhere else (start-up, between fit
and test, writing the records, W&B's finish, exit) its default action ends the process and SLURM
marks the job ``FAILED 10:0`` with nothing requeued. ``install()``, called first by
``scripts/train.py`` and by pelab's submitit launcher in the job (and by ``pelab.train.train``
for a run started from Python), makes the signal:

- before the run's records are final: requeue the job (``scontrol requeue <job id>``) and end
  the process at once (``stop_for_requeue``); the requeued job resumes from the run's
  ``checkpoints/last.ckpt`` (saved at every validation). During training
  ``signals.RequeueAtStepEnd`` defers the signal to the end of a step and saves ``last.ckpt``
  there first, so the requeued job resumes from that step. No ``hpc_ckpt_N.ckpt`` is written:
  Lightning restores one it finds in the run directory before every later ``fit``/``test``
  (issue 42; ``start.adopt_requeue_checkpoints``).
- once ``finished()`` was called (every record of the run is written): ignored, with a log line:
  the job's work is done and a requeue would only run it again.

Only under SLURM (``SLURM_JOB_ID`` set); elsewhere the signal keeps its default action.
Lightning's own requeue handler (which writes ``hpc_ckpt_N``) is off at the source
(``pelab.trainer.make_trainer``: ``SLURMEnvironment(auto_requeue=False)``), so this one serves
during ``fit`` too. Standard library only: it is imported before torch."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import threading
from typing import Any

log = logging.getLogger(__name__)

SIGNAL = signal.SIGUSR1

_state: dict[str, Any] = {"installed": False, "finished": False}


def job_id(environ: dict[str, str] | None = None) -> str | None:
    """The id ``scontrol requeue`` takes: ``<array job>_<task>`` for an array task, else
    ``SLURM_JOB_ID``; None off SLURM."""
    env = os.environ if environ is None else environ
    array = env.get("SLURM_ARRAY_JOB_ID")
    if array and env.get("SLURM_ARRAY_TASK_ID"):
        return f"{array}_{env['SLURM_ARRAY_TASK_ID']}"
    return env.get("SLURM_JOB_ID") or None


def install() -> bool:
    """Handle the requeue signal in this process (main thread, under SLURM only); returns
    whether it is handled. Idempotent."""
    if _state["installed"]:
        return True
    if job_id() is None or threading.current_thread() is not threading.main_thread():
        return False
    signal.signal(SIGNAL, handle)
    _state["installed"] = True
    return True


def installed() -> bool:
    return bool(_state["installed"])


def started() -> None:
    """A new run begins in this process (its records are not final)."""
    _state["finished"] = False


def finished() -> None:
    """Every record of the run is written: from now on the signal is ignored."""
    _state["finished"] = True


def handle(signum: int, frame: Any) -> None:
    """The signal handler (also called by ``RequeueAtStepEnd`` once it saved the step)."""
    if _state["finished"]:
        log.warning("SIGUSR1 after the run's records were written: ignored (the job is done)")
        return
    if requeue():
        stop_for_requeue()


def stop_for_requeue() -> None:
    """End the process at once after a successful requeue: what it would do
    until SLURM kills it (a submitit job ignores SIGTERM until ``KillWait`` ends it) is redone by
    the requeued job, and finishing the run here would let submitit's driver take this run's
    result and stop waiting for the requeued job. Its records stay ``running``: the requeued
    job resumes them (during training from the step ``RequeueAtStepEnd`` just saved)."""
    log.warning("SIGUSR1: this process ends now; the requeued job resumes the run")
    logging.shutdown()
    os._exit(0)


def requeue() -> bool:
    """``scontrol requeue <job id>``; returns whether it succeeded."""
    job = job_id()
    if job is None or not re.fullmatch(r"[0-9_]+", job):
        log.warning("SIGUSR1: not a SLURM job (SLURM_JOB_ID=%r); nothing to requeue", job)
        return False
    try:
        code = subprocess.call(["scontrol", "requeue", job])
    except OSError as error:
        log.warning("SIGUSR1: scontrol requeue %s could not run: %s", job, error)
        return False
    if code == 0:
        log.warning("SIGUSR1: requeued SLURM job %s; it resumes from its last checkpoint", job)
    else:
        log.warning("SIGUSR1: scontrol requeue %s failed with status %d", job, code)
    return code == 0
