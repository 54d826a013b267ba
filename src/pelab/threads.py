"""How many threads torch computes with on the CPU (its intra-op threads), chosen for the work:
``threads: auto`` (the default of ``configs/train.yaml``, ``eval.yaml`` and ``inspect.yaml``,
and of ``pelab.load_run``) or a number. One line of the log says what was chosen and why.

``auto`` takes the first of these that applies:

1. ``OMP_NUM_THREADS`` set in the environment: that many (the user chose);
2. a model below ``ONE_THREAD_BELOW`` parameters: 1. A second thread gains at most 1.9x on an
   idle machine, and on a busy one (another process computing) it cost at worst 22-75x at 0.8M
   parameters and below, 7.8x at 3.2M (docs/performance.md, "Threads");
3. otherwise every core this process may use (its CPU affinity), at most ``AUTO_CAP``; in a job
   of a launcher that runs several at once, its share of the cores instead (``share_cores``).

A number is honoured as given, even above the core count (the log says so). Evaluation, inspection,
``pelab.load_run``, ``scripts/benchmark.py`` and the ``parallel`` launcher's jobs call this module
themselves; training is to call ``configure_threads(cfg, n_params)`` from ``pelab.train``.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from pelab.errors import ConfigError

log = logging.getLogger(__name__)

# From `python scripts/benchmark.py --only threads` (docs/performance.md, "Threads"): below
# this many parameters a second thread risks far more on a busy machine (7.8x slower at 3.2M, up
# to 75x at 0.1M) than it gains on an idle one (1.1-1.9x); at 19M the two are alike (2.9x, 1.9x).
ONE_THREAD_BELOW = 5_000_000
# The most threads ``auto`` gives a larger model: a bound, not a measurement (the machine these
# rules were measured on has 2 cores); ``--only threads`` times 1, 2, 4, ... up to the cores.
AUTO_CAP = 8
DOCS = "docs/performance.md"

_job_cores: int | None = None  # this process's share of the cores, set by a launcher


def available_cores() -> int:
    """The cores this process may use: its CPU affinity (a SLURM or container allocation) where
    the system reports one, else the machine's count."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def share_cores(n: int | None) -> None:
    """This process runs one of several jobs at once with ``n`` of the cores (the ``parallel``
    launcher's ``threads_per_job``, or cores // jobs): ``auto`` chooses at most ``n`` threads
    in it, so that jobs x threads stays within the cores. ``None``: no share (the default)."""
    global _job_cores
    _job_cores = n


def check_threads(requested: Any) -> None:
    """``auto`` or a positive integer, else a ``ConfigError`` naming the value and the choices."""
    if requested == "auto" and isinstance(requested, str):
        return
    if isinstance(requested, int) and not isinstance(requested, bool) and requested >= 1:
        return
    raise ConfigError(
        f"threads={requested!r}: valid choices: auto (chosen by the model's size and the cores, "
        f"{DOCS}), or a positive integer (that many torch threads)"
    )


def millions(n_params: int) -> str:
    """``0.1M``, ``1.2M``, ``19M``: a parameter count as the log line writes it."""
    return f"{n_params / 1e6:.2g}M"


def choose_threads(
    requested: Any, n_params: int | None, cores: int | None = None
) -> tuple[int, str]:
    """The intra-op threads for a model of ``n_params`` parameters (``None``: not known) and why,
    as the log line says it. ``requested``: ``auto`` or a positive integer (``check_threads``);
    ``cores``: those available (default: ``available_cores()``, within this job's share)."""
    check_threads(requested)
    machine = available_cores() if cores is None else cores
    if requested != "auto":
        beyond = f", more than the {machine} cores: they compete" if requested > machine else ""
        return requested, f"threads={requested} as configured{beyond}"
    overrides = "; threads=<n> overrides"
    omp = os.environ.get("OMP_NUM_THREADS", "").strip()
    if omp:
        try:
            from_env = int(omp.split(",")[0])  # OpenMP also takes a list per nesting level
        except ValueError:
            from_env = 0
        if from_env >= 1:
            return from_env, f"OMP_NUM_THREADS={omp} set in the environment{overrides}"
    if n_params is not None and n_params < ONE_THREAD_BELOW:
        return 1, (
            f"model of {millions(n_params)} parameters: below {millions(ONE_THREAD_BELOW)} a "
            f"second thread gains < 2x on an idle machine and can cost up to 75x on a busy one, "
            f"{DOCS}{overrides}"
        )
    size = (
        "model size not known" if n_params is None else f"model of {millions(n_params)} parameters"
    )
    where = f"{machine} cores"
    if cores is None and _job_cores is not None:  # the launcher's share replaces the count
        machine, where = _job_cores, f"this job's share of the cores: {_job_cores}"
    chosen = min(machine, AUTO_CAP)
    cap = f", at most {AUTO_CAP}" if machine > AUTO_CAP else ""
    return chosen, f"{size}, {where}{cap}, {DOCS}{overrides}"


def set_threads(requested: Any, n_params: int | None) -> int:
    """Set torch's intra-op threads to ``choose_threads(requested, n_params)`` (and its
    inter-op threads, where torch still allows it: not after parallel work has started), log
    one line saying what and why, and return the number."""
    import torch  # here: the launchers import this module while Hydra starts (issue 35, item 9)

    threads, reason = choose_threads(requested, n_params)
    torch.set_num_threads(threads)
    if torch.get_num_interop_threads() != threads:
        try:
            torch.set_num_interop_threads(threads)
        except RuntimeError:  # torch refuses once inter-op work has started, or the second time
            pass
    log.info("torch threads: %d (%s)", threads, reason)
    return threads


def configure_threads(cfg: Any, n_params: int | None) -> int:
    """``set_threads`` with the config's ``threads`` (``auto`` where the config has no such key),
    for a model of ``n_params`` parameters (``model.net.num_params()["total"]``)."""
    return set_threads(cfg.get("threads", "auto"), n_params)
