"""One job of ``PoolLauncher``, in its own process (forked from the launcher's fork server):
runs the job as Hydra's launchers do (``run_job`` into ``hydra.sweep.dir``/``hydra.sweep.subdir``)
and writes its ``JobReturn`` to ``result_path``, last and atomically, so the file exists only if
the job returned.

Threads: the job gets the launcher's ``threads`` (``threads_per_job``, or cores // jobs) as its
share of the cores (``pelab.threads.share_cores``) and starts with that many torch threads; its
entry point's ``threads=auto`` then chooses within the share (1 for a small model), so jobs x
threads never exceeds it. A job config's ``threads=<n>`` is honoured as given, from the start.

GPU: a job of a sweep that trains on a GPU sees only its device (``CUDA_VISIBLE_DEVICES``, set
before CUDA starts: its ``cuda:0``, its probe and its memory check are that device) and gets its
share of the device's memory as a per-process memory fraction
(``torch.cuda.set_per_process_memory_fraction``): its allocator cannot hold more, and its own
memory check reads the share, not the memory the other jobs will also take."""

import os
import sys
from pathlib import Path

import cloudpickle
from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import run_job, setup_globals

from hydra_plugins.pelab_launcher.job_config import job_config
from pelab.errors import ConfigError
from pelab.threads import check_threads, set_threads, share_cores


def main(
    call_path: Path,
    result_path: Path,
    log_path: Path,
    threads: int,
    gpu: tuple[str, float] | None,
) -> None:
    """Run the job; ``gpu``: its device's id for ``CUDA_VISIBLE_DEVICES`` and its fraction of
    that device's memory (None: a job on the CPU)."""
    os.setsid()  # a Ctrl-C at the terminal reaches the job once, through the launcher
    with open(log_path, "ab") as out:  # this process's stdout and stderr, appended
        os.dup2(out.fileno(), sys.stdout.fileno())
        os.dup2(out.fileno(), sys.stderr.fileno())
    hydra_context, task_function, config, singleton_state, num, overrides = cloudpickle.loads(
        call_path.read_bytes()
    )
    setup_globals()
    Singleton.set_state(singleton_state)
    sweep_config = job_config(hydra_context, config, overrides, num)
    share_cores(threads)
    if gpu is not None:
        device, fraction = gpu
        os.environ["CUDA_VISIBLE_DEVICES"] = device  # CUDA has not started in this process
        import torch  # here: Hydra imports this module at every start (issue 35, item 9)

        torch.cuda.set_per_process_memory_fraction(fraction)
    set_threads(job_threads(sweep_config.get("threads"), threads), None)
    HydraConfig.instance().set_config(sweep_config)
    returned = run_job(
        hydra_context=hydra_context,
        task_function=task_function,
        config=sweep_config,
        job_dir_key="hydra.sweep.dir",
        job_subdir_key="hydra.sweep.subdir",
    )
    try:
        data = cloudpickle.dumps(returned)
    except Exception as error:  # an unpicklable return value or exception: say what it was
        returned._return_value = RuntimeError(f"the job's return could not be pickled: {error!r}")
        data = cloudpickle.dumps(returned)
    tmp = result_path.with_suffix(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, result_path)
    sys.stdout.flush()
    sys.stderr.flush()


def job_threads(requested: object, share: int) -> int:
    """The torch threads a job starts with: its config's ``threads`` if a number, else its
    ``share`` (a bad value is left to the job's entry point, which refuses it in its record)."""
    try:
        check_threads(requested)
    except ConfigError:
        return share
    return share if requested == "auto" else int(requested)
