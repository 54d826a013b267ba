"""What a SLURM job of a run asks, and whether its partition can ever start it (issue 29, item 1).

The resources follow the run (``job_resources``), for each one the launcher's config leaves
``null`` (its default in ``configs/hydra/launcher/slurm.yaml``; a number given there is asked as
given):

- GPUs: one per device for ``trainer.accelerator=gpu``/``cuda`` (``trainer=gpu``), none for
  ``trainer=default`` (CPU): a CPU cluster refuses a job that asks a GPU it has not got;
- CPUs: the torch threads the run will use (``pelab.threads.choose_threads``: 1 below 5M
  parameters, else up to ``AUTO_CAP``; ``threads=<n>`` as given), plus its data loader workers,
  plus ``GPU_HOST_CPUS`` for a GPU job (its host side: drawing the K members' batches, Lightning
  and W&B's own process, which one CPU shared with the torch thread leaves the GPU waiting on;
  unmeasured on a GPU);
- memory: ``MEM_MARGIN`` times the largest peak a previous run of the job measured
  (``peak_rss_mb`` in its ``results.json``: ``measured_peak_mb``), else ``DEFAULT_MEM_GB``.

``partition_limits`` reads ``scontrol show partition`` and ``sinfo`` for the partition;
``unfit`` names every limit a job exceeds, so the launcher refuses at once a job SLURM would keep
``PENDING (PartitionConfig)`` forever or reject with ``Invalid generic resource``."""

from __future__ import annotations

import math
import re
import resource
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_MEM_GB = 4
MEM_MARGIN = 1.5
GPU_ACCELERATORS = ("gpu", "cuda")
GPU_HOST_CPUS = 1  # a GPU job's host side, beside its torch threads


def peak_rss_mb() -> int:
    """This process's peak resident memory (``getrusage``), in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return math.ceil(peak / (2**20 if sys.platform == "darwin" else 2**10))


def measured_peak_mb(job_dir: Path) -> int | None:
    """The largest ``peak_rss_mb`` a previous run recorded in ``job_dir``."""
    from pelab.record import RESULTS, read_record

    peaks = []
    for path in sorted(job_dir.rglob(RESULTS)) if job_dir.is_dir() else []:
        try:
            peak = read_record(path).get("peak_rss_mb")
        except Exception:
            continue
        if isinstance(peak, int | float) and peak > 0:
            peaks.append(int(peak))
    return max(peaks, default=None)


@dataclass
class Resources:
    """What one job asks: GPUs per node, CPUs per task, memory in GB, and why (one line each)."""

    gpus: int
    cpus: int
    mem_gb: int
    why: list[str] = field(default_factory=list)


def gpus_of(cfg: Any) -> int:
    """GPUs the run's trainer uses: ``trainer.devices`` (1 for ``auto``) on a GPU accelerator."""
    from omegaconf import OmegaConf

    accelerator = str(OmegaConf.select(cfg, "trainer.accelerator", default="cpu"))
    if accelerator not in GPU_ACCELERATORS:
        return 0
    devices = OmegaConf.select(cfg, "trainer.devices", default=1)
    return devices if isinstance(devices, int) and devices > 0 else 1


def job_resources(
    cfg: Any, n_params: int | None, measured_mb: int | None, max_cpus: int | None = None
) -> Resources:
    """What a job of run ``cfg`` needs: ``n_params``: its (stacked) model's parameters (None:
    not known); ``measured_mb``: the peak memory a previous run of it measured (None: none);
    ``max_cpus``: the most CPUs ``threads=auto`` takes (the partition's largest node)."""
    from omegaconf import OmegaConf

    from pelab.threads import AUTO_CAP, choose_threads

    gpus = gpus_of(cfg)
    accelerator = OmegaConf.select(cfg, "trainer.accelerator", default="cpu")
    why = [f"gpus={gpus}: trainer.accelerator={accelerator}"]
    threads, reason = choose_threads(
        cfg.get("threads", "auto"), n_params, cores=min(AUTO_CAP, max_cpus or AUTO_CAP)
    )
    workers = int(OmegaConf.select(cfg, "data.num_workers", default=0) or 0)
    host = GPU_HOST_CPUS if gpus else 0
    cpus = threads + workers + host
    why.append(
        f"cpus={cpus}: {threads} torch thread(s) ({reason})"
        + (f" + {workers} data loader worker(s)" if workers else "")
        + (f" + {host} for the GPU job's host side (batches, Lightning, W&B)" if host else "")
    )
    if measured_mb:
        mem_gb = max(1, math.ceil(measured_mb * MEM_MARGIN / 1024))
        peaked = f"{MEM_MARGIN}x the {measured_mb} MiB a previous run peaked at"
        why.append(f"mem_gb={mem_gb}: {peaked}")
    else:
        mem_gb = DEFAULT_MEM_GB
        why.append(f"mem_gb={mem_gb}: the default (no previous run of this job measured its peak)")
    return Resources(gpus, cpus, mem_gb, why)


@dataclass
class NodeLimits:
    name: str
    cpus: int
    mem_mb: int | None  # None: not configured (SLURM then does not limit memory)
    gpus: int


@dataclass
class PartitionLimits:
    """A partition's limits (None where unlimited or not reported)."""

    name: str
    nodes: list[NodeLimits]
    max_time_min: float | None = None
    max_cpus_per_node: int | None = None
    max_mem_per_node_mb: int | None = None


def parse_time_min(text: str) -> float | None:
    """SLURM's time format (``UNLIMITED``, ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``,
    ``D-H:M:S``) in minutes; None for unlimited or unknown."""
    text = text.strip()
    if not text or text.upper() in ("UNLIMITED", "INFINITE", "NONE", "N/A"):
        return None
    days = 0
    if "-" in text:
        d, text = text.split("-", 1)
        days = int(d)
        parts = [int(p) for p in text.split(":")]
        parts += [0] * (3 - len(parts))
        h, m, s = parts
    else:
        parts = [int(p) for p in text.split(":")]
        h, m, s = {1: (0, parts[0], 0), 2: (0, *parts), 3: tuple(parts)}[len(parts)]
    return days * 1440 + h * 60 + m + s / 60


def parse_mem_mb(text: str) -> int | None:
    """``7000``, ``7000M``, ``64G``, ``1T`` in MiB; None for ``UNLIMITED``/``0``/unknown."""
    match = re.fullmatch(r"(\d+)([KMGT]?)", text.strip().upper())
    if not match or int(match.group(1)) == 0:
        return None
    scale = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024**2}[match.group(2)]
    return math.ceil(int(match.group(1)) * scale)


def parse_gpus(gres: str) -> int:
    """GPUs in a node's ``GRES`` (``gpu:4``, ``gpu:a100:4(S:0-1)``, ``(null)``)."""
    total = 0
    for item in gres.split(","):
        parts = re.sub(r"\(.*?\)", "", item).strip().split(":")
        if parts[0] == "gpu":
            total += int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else 1
    return total


def parse_partition(name: str, scontrol: str, sinfo: str) -> PartitionLimits:
    """``scontrol show partition <name> --oneliner`` and ``sinfo -p <name> -h -N -o '%N %c %m
    %G'`` as limits."""
    fields = dict(re.findall(r"(\w+)=(\S*)", scontrol))
    nodes, seen = [], set()
    for line in sinfo.splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[0] in seen:
            continue
        seen.add(parts[0])
        cpus = int(re.sub(r"\D.*", "", parts[1]) or 0)
        mem = parse_mem_mb(parts[2].rstrip("+"))
        nodes.append(NodeLimits(parts[0], cpus, mem, parse_gpus(parts[3])))
    max_cpus = fields.get("MaxCPUsPerNode", "UNLIMITED")
    return PartitionLimits(
        name=name,
        nodes=nodes,
        max_time_min=parse_time_min(fields.get("MaxTime", "UNLIMITED")),
        max_cpus_per_node=int(max_cpus) if max_cpus.isdigit() else None,
        max_mem_per_node_mb=parse_mem_mb(fields.get("MaxMemPerNode", "UNLIMITED")),
    )


def partition_limits(name: str | None) -> PartitionLimits | None:
    """The limits of partition ``name`` (None: the default partition) from ``scontrol`` and
    ``sinfo``; None where they cannot be read (not a SLURM host, the commands fail)."""
    try:
        if name is None:
            out = _call(["sinfo", "-h", "-o", "%P"])
            name = next((p[:-1] for p in out.split() if p.endswith("*")), None)
            if name is None:
                return None
        scontrol = _call(["scontrol", "show", "partition", name, "--oneliner"])
        sinfo = _call(["sinfo", "-p", name, "-h", "-N", "-o", "%N %c %m %G"])
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_partition(name, scontrol, sinfo)


def _call(command: list[str]) -> str:
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=30).stdout


def unfit(
    limits: PartitionLimits, gpus: int, cpus: int, mem_gb: float | None, timeout_min: float | None
) -> list[str]:
    """Every limit of partition ``limits`` that a job asking ``gpus``/``cpus``/``mem_gb`` for
    ``timeout_min`` minutes exceeds, each naming the limit and the launcher option to change;
    empty when some node of the partition can start it."""
    p, problems = limits.name, []
    if timeout_min is not None and limits.max_time_min is not None:
        if timeout_min > limits.max_time_min:
            problems.append(
                f"hydra.launcher.timeout_min={timeout_min:g} exceeds partition {p}'s MaxTime "
                f"({limits.max_time_min:g} min)"
            )
    if limits.max_cpus_per_node is not None and cpus > limits.max_cpus_per_node:
        problems.append(
            f"hydra.launcher.cpus_per_task={cpus} exceeds partition {p}'s MaxCPUsPerNode="
            f"{limits.max_cpus_per_node}"
        )
    mem_mb = None if mem_gb is None else mem_gb * 1024
    if mem_mb is not None and limits.max_mem_per_node_mb is not None:
        if mem_mb > limits.max_mem_per_node_mb:
            problems.append(
                f"hydra.launcher.mem_gb={mem_gb:g} exceeds partition {p}'s MaxMemPerNode="
                f"{limits.max_mem_per_node_mb} MB"
            )
    nodes = limits.nodes
    if not nodes:
        return problems
    if gpus and max(n.gpus for n in nodes) < gpus:
        most = max(n.gpus for n in nodes)
        problems.append(
            f"hydra.launcher.gpus_per_node={gpus}: partition {p}'s nodes have "
            + (f"at most {most} GPU(s)" if most else "no GPU (no gpu GRES)")
            + "; train on the CPU with trainer=default (it asks no GPU), or pick a GPU partition"
        )
    if max(n.cpus for n in nodes) < cpus:
        problems.append(
            f"hydra.launcher.cpus_per_task={cpus} exceeds partition {p}'s largest node "
            f"({max(n.cpus for n in nodes)} CPUs)"
        )
    known = [n.mem_mb for n in nodes if n.mem_mb is not None]
    if mem_mb is not None and known and max(known) < mem_mb:
        problems.append(
            f"hydra.launcher.mem_gb={mem_gb:g} exceeds partition {p}'s largest node "
            f"({max(known)} MB of memory)"
        )
    if not problems and not any(
        n.cpus >= cpus
        and n.gpus >= gpus
        and (mem_mb is None or n.mem_mb is None or n.mem_mb >= mem_mb)
        for n in nodes
    ):
        problems.append(
            f"no node of partition {p} has {cpus} CPUs, {gpus} GPU(s) and {mem_gb:g} GB at once"
        )
    return problems
