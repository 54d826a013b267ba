"""A local sweep's GPU jobs on the node's GPUs, for both local launchers (``hydra/launcher=
parallel``, ``pool_launcher``; ``hydra/launcher=local``, ``submitit_launcher``): which jobs train
on a GPU (``wants_gpu``); each GPU's free memory and what each job needs on one (``probe_gpu``,
read in a child process: the launching process holds no CUDA context while the sweep runs); for
the parallel launcher, how many jobs each GPU runs at once and each one's share of its memory
(``share_gpus``, ``place_jobs``, ``spread``) and the GPU a starting job takes (``take_gpu``); for
the local submitit launcher, each job's GPU in turn (``local_gpus``). A job sees its GPU by the id
``CUDA_VISIBLE_DEVICES`` gives it (``visible_devices``)."""

import logging
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from hydra_plugins.pelab_launcher.job_config import run_config
from pelab.errors import ConfigError

log = logging.getLogger(__name__)

# what the parallel launcher's fork server imports once, for its jobs and the GPU probe (the one
# fork server of the process: the first to start it sets its preload)
PRELOAD = ["torch", "lightning", "hydra_plugins.pelab_launcher.worker", "pelab.train"]
# each GPU job's CUDA context and kernels, outside torch's allocator and its share: an allowance,
# unmeasured on a GPU here
CUDA_CONTEXT_BYTES = 2**30


@dataclass
class Gpu:
    """One GPU of the node as the sweep uses it: its id for ``CUDA_VISIBLE_DEVICES``, how many
    jobs it runs at once, and each one's fraction of its memory."""

    device: str
    jobs: int
    fraction: float
    running: int = 0


def share_gpus(
    on_gpu: list[tuple[DictConfig, Path]], measured: bool, n_jobs: int, cores: int, total: int
) -> list[Gpu]:
    """The GPUs that the ``on_gpu`` jobs (each one's config and directory) of a sweep of
    ``total`` jobs run on, every GPU of the node (``probe_gpu``): ``measured`` (``n_jobs=-1``),
    on each device as many jobs at once as fit its free memory (the largest need measured of a
    training job that fits alone, plus ``CUDA_CONTEXT_BYTES``; none: one at a time per device),
    at most one per core of ``cores``; else ``n_jobs`` spread over the devices. Each job's
    allocator is held to its share of its device's free memory."""
    from pelab.reliability.checks.memory import GIB

    devices, needs = probe_gpu(on_gpu if measured else [])
    free = [f for f, _ in devices]
    if measured:
        fitting = [need for need in needs if need is not None and need <= max(free)]
        need = max(fitting, default=max(free)) + CUDA_CONTEXT_BYTES  # none fits: one each
        slots = place_jobs(free, need, cores, total)
        log.info(
            "%d job(s) at once on %d GPU(s) (%s): each needs about %.1f GiB (%d of %d jobs "
            "measured to fit alone; the others' memory checks say why)",
            sum(slots),
            len(devices),
            ", ".join(
                f"{n} on GPU {d} of {f / GIB:.1f} GiB free"
                for d, n, f in zip(visible_devices(len(devices)), slots, free, strict=True)
            ),
            need / GIB,
            len(fitting),
            len(on_gpu),
        )
    else:
        slots = spread(n_jobs, [n_jobs] * len(devices))
    gpus = []
    for device, n, (f, whole) in zip(visible_devices(len(devices)), slots, devices, strict=True):
        if not n:
            continue
        share = f / n - CUDA_CONTEXT_BYTES
        if share <= 0:
            raise ConfigError(
                f"hydra.launcher.n_jobs={n_jobs}: that many jobs at once leave each "
                f"{f / n / GIB:.2f} GiB of GPU {device}'s {f / GIB:.1f} GiB free, less than "
                f"a CUDA context takes ({CUDA_CONTEXT_BYTES / GIB:.0f} GiB allowed); give "
                "fewer, or -1 for as many as fit"
            )
        gpus.append(Gpu(device, n, share / whole))
        log.info("each job on GPU %s may hold %.1f GiB (its share)", device, share / GIB)
    return gpus


def take_gpu(gpus: list[Gpu]) -> Gpu:
    """A GPU of ``gpus`` with room for one more job, the one running the fewest (ties: the most
    room left, then the first), now holding it."""
    open_ = [i for i, g in enumerate(gpus) if g.running < g.jobs]
    if not open_:
        raise RuntimeError(f"no GPU has room: {gpus}")  # n_jobs is the jobs' sum
    gpu = gpus[min(open_, key=lambda i: (gpus[i].running, -gpus[i].jobs, i))]
    gpu.running += 1
    return gpu


def place_jobs(free: list[int], need: int, cores: int, jobs: int) -> list[int]:
    """How many of ``jobs`` jobs each GPU runs at once, its ``free[i]`` bytes free and each job
    needing ``need``: as many as fit on each, at most one per core in all, spread evenly
    (``spread``); at least one on the GPU with the most free memory (a job that cannot fit
    alone is refused by its own memory check)."""
    for name, value, least in (("need", need, 1), ("cores", cores, 1), ("jobs", jobs, 1)):
        if value < least:
            raise ValueError(f"{name}={value}: give >= {least}")
    if not free or min(free) < 0:
        raise ValueError(f"free={free}: give each GPU's free bytes (>= 0)")
    fits = [f // need for f in free]
    if not any(fits):
        fits[free.index(max(free))] = 1
    return spread(min(cores, jobs, sum(fits)), fits)


def spread(n: int, room: list[int]) -> list[int]:
    """``n`` jobs over devices with ``room[i]`` places each, evenly: each next job to a device
    with a place left that has the fewest jobs (ties: the most places left, then the first); at
    most ``sum(room)``."""
    slots = [0] * len(room)
    for _ in range(min(n, sum(room))):
        open_ = [d for d in range(len(room)) if slots[d] < room[d]]
        slots[min(open_, key=lambda d: (slots[d], slots[d] - room[d], d))] += 1
    return slots


def local_gpus(on_gpu: list[bool]) -> list[str | None]:
    """The GPU each job of a local submitit sweep sees (None: a CPU job): the node's GPUs
    (``probe_gpu``) in turn, the one with the most free memory first, as
    ``CUDA_VISIBLE_DEVICES`` names them. A ``ConfigError`` when a job trains on a GPU and none
    is visible."""
    if not any(on_gpu):
        return [None] * len(on_gpu)
    devices, _ = probe_gpu([])
    ids = visible_devices(len(devices))
    order = sorted(range(len(devices)), key=lambda i: (-devices[i][0], i))
    placed, turn = [], 0
    for wants in on_gpu:
        placed.append(ids[order[turn % len(order)]] if wants else None)
        turn += wants
    return placed


def wants_gpu(config: DictConfig) -> bool:
    """Whether a job of ``config`` trains on a GPU: ``trainer.accelerator`` asks one
    (``trainer=gpu``; a machine without any then refuses the sweep before a job starts,
    ``probe_gpu``), or ``auto`` where CUDA is."""
    import torch

    from pelab.reliability.cluster.slurm import GPU_ACCELERATORS

    accelerator = str(config.trainer.get("accelerator", "cpu"))
    return accelerator in GPU_ACCELERATORS or (accelerator == "auto" and torch.cuda.is_available())


def visible_devices(count: int) -> list[str]:
    """The ids of this process's ``count`` GPUs for a job's ``CUDA_VISIBLE_DEVICES``: as this
    process's ``CUDA_VISIBLE_DEVICES`` names them (a SLURM allocation's), else 0 .. count - 1."""
    named = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return named[:count] if len(named) >= count else [str(i) for i in range(count)]


def probe_gpu(
    jobs: list[tuple[DictConfig, Path]],
) -> tuple[list[tuple[int, int]], list[int | None]]:
    """Each GPU's free and total bytes, and what each of ``jobs`` (its config and directory)
    needs on one (``measure``, on the GPU with the most free memory), read in a child process:
    this one holds no CUDA context while the sweep runs. A ``ConfigError`` naming the cause when
    the probe itself fails; a job it could not measure is named in one line and counts as not
    fitting alone."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    try:
        with ProcessPoolExecutor(1, mp_context=context) as child:
            devices, needs, failures = child.submit(_probe_gpu, jobs).result()
    except Exception as error:
        raise ConfigError(
            f"the GPU probe failed before any job started: {type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''} (check nvidia-smi and "
            "CUDA_VISIBLE_DEVICES, or give hydra.launcher.n_jobs=<N> to skip measuring)"
        ) from error
    if not devices:
        raise ConfigError(
            "the sweep's jobs train on a GPU (trainer.accelerator) but none is visible here "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}); use "
            "trainer=default for the CPU"
        )
    for job, failure in failures:
        log.warning(
            "the GPU probe could not measure job %s (counted as not fitting alone): %s",
            job,
            failure,
        )
    return devices, needs


def _probe_gpu(jobs: list[tuple[DictConfig, Path]]):
    import torch

    devices = [torch.cuda.mem_get_info(i) for i in range(torch.cuda.device_count())]
    if not devices:
        return devices, [], []
    torch.cuda.set_device(max(range(len(devices)), key=lambda i: devices[i][0]))
    needs, failures = [], []
    for config, output_dir in jobs:
        try:
            needs.append(measure(config, output_dir, "cuda"))
        except Exception as error:  # a CUDA-only failure: say which and why
            needs.append(None)
            first = str(error).splitlines()[0] if str(error) else ""
            failures.append((output_dir.name, f"{type(error).__name__}: {first}"))
    return devices, needs, failures


def measure(config: DictConfig, output_dir: Path, device: str) -> int | None:
    """The bytes a training job of the composed config ``config`` (``job_config``; its
    directory ``output_dir``) needs on ``device`` (``pelab.sizing.job_need``); None when its
    config is refused (the job then says why) or it does not train (an evaluation job's own
    memory check measures it). Any other error propagates, for the probe to name."""

    import torch

    from pelab.sizing import job_need

    if "model" not in config:  # scripts/eval.py's: the model is the checkpoint's
        return None
    HydraConfig.instance().set_config(config)  # ${hydra:...} resolves as in the job
    try:
        return job_need(run_config(config, output_dir), device)
    except (ConfigError, torch.cuda.OutOfMemoryError):  # refused, or does not fit alone:
        return None  # the job itself says why
