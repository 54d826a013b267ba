"""Does pelab fill a GPU? One command, one table: ``python scripts/gpu_check.py`` (or
``make gpu-check``), meant to fit 9 minutes on one GPU (not yet timed on one; the 25 rate rows
are about 25 short runs more); ``--device cpu --quick`` runs each kind of row at toy size on a
CPU in seconds (``tests/test_gpu_check.py``, in ``make test``, so it cannot rot).

Every row is a real pelab run (``pelab.train.train``; the ``jobs`` rows through the parallel
launcher, as ``scripts/train.py -m`` runs them):

- ``default``: ``pe=rope task=copy trainer=gpu``, to its ``learned_at`` stop: learned, and at which
  step; the wall time of the run.
- ``members K`` (K = 1, 5, 20, 64; ``--quick``: 1, 2): the ``ablation_gpu`` model
  (``pe=rope task=copy``) with ``seeds=[0..K-1]`` for ``--steps`` steps: steps/s and
  member-steps/s of the training steps after a warm-up (validation, test and start-up
  excluded), the device's peak memory.
- ``preset P``: one job of each other GPU preset (``nope_decoder_gpu``, ``chomsky_gpu``;
  ``--quick``: the second), the same measures.
- ``jobs J`` (J = 1, 2, 4, 8; ``--quick``: 2): J jobs of
  ``experiment=ablation_cpu trainer=gpu pe=rope task=sort`` (3 members each) sharing the device
  through the parallel launcher, ``--steps`` steps each: the sweep's wall time (start-up
  included) and its member-steps/s over the jobs' training time (the longest stack's
  ``fit_time_s``: start-up excluded), as a ratio to J = 1's; and ``jobs 8 auto``, the 8 jobs with
  ``hydra.launcher.n_jobs=-1`` (as many at once as the launcher measures to fit).
- ``node N gpus`` (a node of N >= 2 GPUs only): N jobs as in ``jobs``, one per GPU (the
  parallel launcher places them), against ``jobs 1``: at least 0.8 N times its member-steps/s.
- ``rate P`` for each encoding P of the ``ablation_gpu`` grid (``--quick``: rope, t5_bias): its
  stack of 5 at that size on copy for ``--rate-steps`` steps. The grid's GPU-hours follow, one
  job at a time (each encoding's steps/s over the grid's steps, for each task; training only),
  and with 8 jobs sharing the GPU (the ``jobs 8`` speed-up): target at most 8.
- ``syncs``: host syncs per training step (``benchmarks.syncs``) of the ``ablation_gpu`` stack
  (K = 5): the most at a step that neither logs nor validates, and at a logging step.

Every row that trains names the attention kernel and dtype its run recorded (``kernel``:
``pelab.kernels``), so the rate rows say which kernel each encoding gets.

Each row is printed as it finishes (``--json`` rewritten after each); a row that fails says why
and the check goes on. Then each target (``TARGETS``, docs/performance.md "On a GPU") beside its
figure: K = 20 at most 2x the wall of K = 1 for the same steps, for rope, t5_bias and path; 8
jobs at least 4x the member-steps/s of one. A miss or a failed row: exit status 1 (``cli``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import lightning as L
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.callbacks import Callback
from omegaconf import open_dict

from benchmarks.syncs import CountHostSyncs, HostSyncs
from pelab.train import train

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
PROBE = "+callbacks.gpu_check._target_=benchmarks.gpu_check.Probe"
# the quick mode's toy size: each kind of row runs, in seconds, on a CPU
TOY = [
    "model.net.d_model=16",
    "model.net.n_heads=2",
    "model.net.n_layers=1",
    "model.net.d_ff=32",
    "data.batch_size=4",
    "data.eval_batch_size=8",
    "task.n_val=4",
    "task.n_test=4",
]


@dataclass
class Row:
    name: str
    steps: int | None = None
    wall_s: float | None = None  # the run's (a sweep's: every job's, start-up included)
    steps_per_s: float | None = None  # training steps after the warm-up
    member_steps_per_s: float | None = None
    peak_gib: float | None = None  # the device's peak allocated memory (GPU only)
    syncs: str | None = None  # host syncs per step
    result: str = ""
    kernel: str | None = None  # the attention kernel and its dtype (the record's ``attention``)


class Probe(Callback):
    """Times the training steps from step ``warmup`` to the last (the device synchronised at
    both ends, nowhere between), reads the device's peak memory and, with ``count_syncs``,
    counts each step's host syncs. The last probe to finish is ``Probe.last``."""

    last: ClassVar[Probe | None] = None

    def __init__(self, warmup: int = 5, count_syncs: bool = False) -> None:
        self.warmup, self.count_syncs = warmup, count_syncs
        self.start = self.end = 0.0
        self.timed = 0
        self.peak_gib: float | None = None
        self.counter: CountHostSyncs | None = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(pl_module.device)
        if self.count_syncs:
            self.counter = CountHostSyncs(HostSyncs())
            self.counter.syncs.__enter__()
            self.counter.on_fit_start(trainer, pl_module)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.counter is not None:
            self.counter.on_train_batch_start(trainer, pl_module, batch, batch_idx)
        if trainer.global_step == min(self.warmup, trainer.max_steps - 1):
            _synchronize(pl_module.device)
            self.start, self.first = time.perf_counter(), trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == trainer.max_steps:  # the last step
            _synchronize(pl_module.device)
            self.end, self.timed = time.perf_counter(), trainer.global_step - self.first

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        if self.counter is not None:
            self.counter.on_validation_batch_start(trainer, pl_module, batch, batch_idx)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.counter is not None:
            self.counter.on_train_end(trainer, pl_module)
            self.counter.syncs.__exit__(None, None, None)
        if pl_module.device.type == "cuda":
            self.peak_gib = torch.cuda.max_memory_allocated(pl_module.device) / 2**30
        Probe.last = self

    @property
    def steps_per_s(self) -> float | None:
        return self.timed / (self.end - self.start) if self.timed else None


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def compose_run(overrides: list[str], root: Path) -> Any:
    """``configs/train.yaml`` with ``overrides``, composed as ``scripts/train.py`` composes it,
    writing inside ``root``, W&B off."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    HydraConfig().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
        cfg.paths.root_dir = str(root)
        cfg.paths.output_dir = str(root / "run")
    return cfg


def measured_run(name: str, overrides: list[str], root: Path, members: int = 1) -> Row:
    """One in-process run with a ``Probe``: its row."""
    Probe.last = None
    cfg = compose_run([*overrides, PROBE, "logger=none"], root / name.replace(" ", "_"))
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # each run's own table: the check prints one
        records = train(cfg)
    wall = time.perf_counter() - start
    probe = Probe.last
    first = records[0]
    rate = None if probe is None else probe.steps_per_s
    kernel = first.get("attention")  # what the run's attention dispatched (pelab.kernels)
    return Row(
        name,
        wall_s=wall,
        steps_per_s=rate,
        member_steps_per_s=None if rate is None else rate * members,
        peak_gib=None if probe is None else probe.peak_gib,
        result=first["status"],
        kernel=None if kernel is None else f"{kernel['kernel']}, {kernel['dtype']}",
    )


def default_row(args: argparse.Namespace, root: Path) -> Row:
    overrides = ["pe=rope", "task=copy", f"trainer={args.trainer}", *_device(args)]
    if args.quick:
        overrides += [*TOY, "trainer.max_steps=12", "trainer.val_check_interval=6"]
    row = measured_run("default", overrides, root)
    record = _records(root / "default")[0]
    learned = record.get("steps_to_learn")
    row.steps = learned or record["config"]["trainer"]["max_steps"]
    row.result = f"learned at step {learned}" if learned else "not learned"
    return row


def _records(directory: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(directory.rglob("results.json"))]


def members_row(args: argparse.Namespace, root: Path, k: int, pe: str = "rope") -> Row:
    seeds = ",".join(str(s) for s in range(k))
    overrides = ["experiment=ablation_gpu", f"pe={pe}", "task=copy", f"seeds=[{seeds}]"]
    overrides += _steps(args) + _size(args)
    name = f"members {k}" + ("" if pe == "rope" else f" {pe}")
    row = measured_run(name, overrides, root, members=k)
    row.steps = args.steps
    return row


def preset_row(args: argparse.Namespace, root: Path, preset: str) -> Row:
    overrides = [f"experiment={preset}", *_steps(args), *_size(args)]
    if preset == "chomsky_gpu":  # 460 evaluation lengths: two suffice to time the training
        overrides.append("task.eval_lengths=[20,40]")
    members = len(compose_run(overrides, root).get("seeds") or [0])
    row = measured_run(f"preset {preset}", overrides, root, members=members)
    row.steps = args.steps
    return row


def jobs_row(
    args: argparse.Namespace, root: Path, jobs: int, auto: bool = False, name: str | None = None
) -> Row:
    """``jobs`` jobs of ``ablation_cpu trainer=gpu`` sharing the device (the parallel launcher),
    each with its own 3 members (distinct seeds), in a process of their own as a user runs
    them; all at once, or with ``auto`` as many as the launcher finds fit
    (``hydra.launcher.n_jobs=-1``: each job measured on the GPU first)."""
    choices = ",".join(f"[{3 * j},{3 * j + 1},{3 * j + 2}]" for j in range(jobs))
    name = name or f"jobs {jobs}" + (" auto" if auto else "")
    sweep = root / name.replace(" ", "_")
    command = [
        sys.executable,
        str(REPO / "scripts" / "train.py"),
        "-m",
        "experiment=ablation_cpu",
        f"trainer={args.trainer}",
        "hydra.sweeper.params.pe=rope",
        "hydra.sweeper.params.task=sort",
        f"seeds={choices}",
        "learned_at=null",
        f"hydra.launcher.n_jobs={-1 if auto else jobs}",
        f"hydra.sweep.dir={sweep}",
        "logger=none",
        *_steps(args),
        *_size(args),
    ]
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=_env())
    wall = time.perf_counter() - start
    records = _records(sweep)
    done = sum(r.get("status") == "completed" for r in records)
    # throughput over the jobs' training time (their stacks' fit_time_s, run side by side), not
    # the sweep's wall: process start-up would otherwise decide the ratio whatever the GPU does
    fits = [r["member_of"]["fit_time_s"] for r in records if r.get("member_of")]
    result = f"{done} of {3 * jobs} members completed"
    if proc.returncode != 0:
        result += f"; exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}"
    if auto:
        said = (proc.stdout + proc.stderr).splitlines()
        at_once = [line for line in said if "at once on the GPU" in line]
        result += f"; {at_once[-1].split('] ')[-1]}" if at_once else ""
    return Row(
        name,
        steps=args.steps,
        wall_s=wall,
        member_steps_per_s=3 * jobs * args.steps / max(fits) if fits else None,
        result=result,
    )


def grid_encodings() -> list[str]:
    """The encodings of the ``ablation_gpu`` grid, read from its sweep (``glob(...)`` over the
    registry), as ``-m`` expands it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from pelab.pe import PE_REGISTRY

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose("train", overrides=["experiment=ablation_gpu"], return_hydra_config=True)
    value = OverridesParser.create().parse_override(f"pe={cfg.hydra.sweeper.params.pe}").value()
    return value.filter(sorted(PE_REGISTRY)) if hasattr(value, "filter") else [str(value)]


def rate_row(args: argparse.Namespace, root: Path, pe: str) -> Row:
    """``pe``'s stack of ``GRID_MEMBERS`` at the ``ablation_gpu`` size on copy, ``--rate-steps``
    steps: the steps/s the grid's GPU-hours are read from, and the kernel it gets."""
    seeds = ",".join(str(s) for s in range(GRID_MEMBERS))
    overrides = ["experiment=ablation_gpu", f"pe={pe}", "task=copy", f"seeds=[{seeds}]"]
    steps = [
        f"trainer.max_steps={args.rate_steps}",
        f"trainer.val_check_interval={args.rate_steps}",
    ]
    row = measured_run(f"rate {pe}", [*overrides, *steps, *_size(args)], root, GRID_MEMBERS)
    row.steps = args.rate_steps
    return row


GRID_MEMBERS = 5  # ablation_gpu's seeds per job


def grid_hours(rows: list[Row]) -> tuple[float, int] | None:
    """The ``ablation_gpu`` grid's GPU-hours one job at a time: for each encoding its rate row's
    steps/s over the grid's steps (``trainer.max_steps``) for each of its tasks (training only:
    validation and test excluded), and how many encodings had a rate. None without any."""
    rates = {
        r.name.removeprefix("rate "): r.steps_per_s for r in rows if r.name.startswith("rate ")
    }
    measured = {pe: rate for pe, rate in rates.items() if rate}
    if not measured:
        return None
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose("train", overrides=["experiment=ablation_gpu"], return_hydra_config=True)
    tasks = len(str(cfg.hydra.sweeper.params.task).split(","))
    steps = cfg.trainer.max_steps
    return sum(tasks * steps / rate for rate in measured.values()) / 3600, len(measured)


def syncs_row(args: argparse.Namespace, root: Path) -> Row:
    """Host syncs per step of the ``ablation_gpu`` stack, counted over 12 steps (logging every
    4th, one validation at the end)."""
    probe = "+callbacks.gpu_check.count_syncs=true"
    overrides = ["experiment=ablation_gpu", "pe=rope", "task=copy", *_size(args)]
    overrides += ["trainer.max_steps=12", "trainer.val_check_interval=12"]
    overrides += ["trainer.log_every_n_steps=4", "test=false", probe]
    row = measured_run("syncs", overrides, root, members=5)
    per_step = Probe.last.counter.per_step
    quiet = [n for s, n in per_step.items() if (s + 1) % 4 and s != 11]
    logging = [n for s, n in per_step.items() if not (s + 1) % 4 and s != 11]
    row.steps, row.wall_s, row.steps_per_s, row.member_steps_per_s = 12, None, None, None
    row.syncs = f"{max(quiet)} quiet, {max(logging)} logging"
    return row


def _steps(args: argparse.Namespace) -> list[str]:
    return [f"trainer.max_steps={args.steps}", f"trainer.val_check_interval={args.steps}"]


def _size(args: argparse.Namespace) -> list[str]:
    """A timed run's size (toy with ``--quick``) and device; no test at the end, and a small
    validation (after the timed steps; K = 64 members would greedily decode 64 x the batch)."""
    small = TOY if args.quick else ["task.n_val=64", "data.eval_batch_size=64"]
    return [*small, *_device(args), "test=false"]


def _device(args: argparse.Namespace) -> list[str]:
    """On the CPU, the GPU presets' trainer runs there (bf16 autocast included)."""
    return ["trainer.accelerator=cpu"] if args.device == "cpu" else []


def _env() -> dict[str, str]:
    """The environment of the jobs' process: this one's, with ``src`` importable (a machine
    where pelab runs from its source tree, without an install) and W&B off."""
    env = dict(os.environ, WANDB_MODE="disabled")
    paths = [str(REPO / "src"), str(REPO), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


HEADER = ["row", "steps", "wall s", "steps/s", "member-steps/s", "peak GiB", "syncs", "kernel"]
HEADER += ["result"]
WIDTHS = [22, 6, 8, 8, 15, 9, 20, 26, 0]


def line(row: Row) -> str:
    """``row`` as one line of the table, printed as soon as it is measured."""
    cells = [
        row.name,
        _fmt(row.steps, "d"),
        _fmt(row.wall_s, ".1f"),
        _fmt(row.steps_per_s, ".1f"),
        _fmt(row.member_steps_per_s, ".1f"),
        _fmt(row.peak_gib, ".2f"),
        row.syncs or "",
        row.kernel or "",
        row.result,
    ]
    return "  ".join(c.ljust(w) for c, w in zip(cells, WIDTHS, strict=True)).rstrip()


# (what is held, the row measured, its baseline, the measure, the least ratio): docs/performance.md
# "On a GPU". K = 20 within 2x the wall of K = 1 for the same steps is steps/s at least half.
TARGETS = [
    *(
        (
            f"{pe}: K = 20 at most 2x the wall of K = 1",
            f"members 20{tag}",
            f"members 1{tag}",
            "steps_per_s",
            0.5,
        )
        for pe, tag in (("rope", ""), ("t5_bias", " t5_bias"), ("path", " path"))
    ),
    ("8 jobs at least 4x one job's member-steps/s", "jobs 8", "jobs 1", "member_steps_per_s", 4.0),
]
NODE_EFFICIENCY = 0.8  # N GPUs, one job each: at least 0.8 N times one job's member-steps/s
GRID_HOURS = 8.0  # the ablation_gpu grid on one GPU, with the jobs sharing it (issue 43)


def judge(rows: list[Row], quick: bool) -> tuple[list[str], bool]:
    """Each target beside its figure (``TARGETS``), and whether every one is met and no row
    failed. At ``--quick`` toy size nothing is judged but that every row ran."""
    failed = [r.name for r in rows if r.result.startswith("FAILED")]
    lines = [f"FAILED rows: {', '.join(failed)}"] if failed else []
    if quick:
        return [*lines, "targets: not judged at --quick toy size"], not failed
    by_name, ok = {r.name: r for r in rows}, not failed
    for label, mine, base, measure, least in TARGETS:
        a, b = (getattr(by_name.get(n, Row(n)), measure) for n in (mine, base))
        if a is None or not b:
            lines.append(f"MISS  {label}: not measured ({mine} or {base} has no {measure})")
            ok = False
            continue
        met = a / b >= least
        ok &= met
        lines.append(f"{'met ' if met else 'MISS'}  {label}: {a / b:.2f}x (target >= {least}x)")
    node = next((r for r in rows if r.name.startswith("node ")), None)
    if (
        node is not None
        and node.member_steps_per_s
        and by_name.get("jobs 1", Row("")).member_steps_per_s
    ):
        gpus = int(node.name.split()[1])
        ratio = node.member_steps_per_s / by_name["jobs 1"].member_steps_per_s
        met = ratio >= NODE_EFFICIENCY * gpus
        ok &= met
        lines.append(
            f"{'met ' if met else 'MISS'}  {gpus} GPUs, one job each, at least "
            f"{NODE_EFFICIENCY} x {gpus} one job's member-steps/s: {ratio:.2f}x"
        )
    hours = grid_hours(rows)
    if hours is None:
        lines.append("MISS  the ablation_gpu grid's GPU-hours: no rate row measured")
        return lines, False
    alone, encodings = hours
    shared = by_name.get("jobs 8", Row("")).member_steps_per_s
    one = by_name.get("jobs 1", Row("")).member_steps_per_s
    speedup = shared / one if shared and one else 1.0
    met = alone / speedup <= GRID_HOURS
    ok &= met
    lines.append(
        f"{'met ' if met else 'MISS'}  the ablation_gpu grid at most {GRID_HOURS:g} GPU-hours "
        f"on one GPU: {alone:.1f} one job at a time ({encodings} encodings' rates), "
        f"{alone / speedup:.1f} with 8 jobs sharing it ({speedup:.2f}x); training steps only"
    )
    return lines, ok


def _fmt(value: float | int | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--quick", action="store_true", help="toy size, each kind of row")
    parser.add_argument("--steps", type=int, default=None, help="steps per timed run (200)")
    parser.add_argument("--rate-steps", type=int, default=None, help="steps per rate row (40)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here (torch.cuda.is_available() is False)")
    args.steps = args.steps or (8 if args.quick else 200)
    args.rate_steps = args.rate_steps or (8 if args.quick else 40)
    args.trainer = "gpu" if args.device == "cuda" else "default"
    return args


@dataclass
class Check:
    rows: list[Row]
    ok: bool  # every row ran and (but at --quick) every target is met


def main(argv: list[str] | None = None) -> Check:
    """Every row, each printed as it finishes; a row that fails says why and the check goes on;
    then each target beside its figure. ``cli`` turns a miss into a non-zero exit."""
    args = parse(argv)
    members = (1, 2) if args.quick else (1, 5, 20, 64)
    jobs = (2,) if args.quick else (1, 2, 4, 8)
    presets = ("chomsky_gpu",) if args.quick else ("nope_decoder_gpu", "chomsky_gpu")
    device = torch.cuda.get_device_name() if args.device == "cuda" else "the CPU"
    print(f"pelab gpu_check on {device}, torch {torch.__version__}", flush=True)
    print("  ".join(h.ljust(w) for h, w in zip(HEADER, WIDTHS, strict=True)).rstrip(), flush=True)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        root = Path(tmp)
        plan = [("default", lambda: default_row(args, root))]
        plan += [(f"members {k}", lambda k=k: members_row(args, root, k)) for k in members]
        if not args.quick:  # the stack's other families: a bias, and PaTH's scan
            plan += [
                (f"members {k} {pe}", lambda k=k, pe=pe: members_row(args, root, k, pe))
                for pe in ("t5_bias", "path")
                for k in (1, 20)
            ]
        plan += [(f"preset {p}", lambda p=p: preset_row(args, root, p)) for p in presets]
        plan.append(("syncs", lambda: syncs_row(args, root)))
        plan += [(f"jobs {j}", lambda j=j: jobs_row(args, root, j)) for j in jobs]
        if not args.quick:
            plan.append(("jobs 8 auto", lambda: jobs_row(args, root, 8, auto=True)))
        gpus = torch.cuda.device_count() if args.device == "cuda" else 0
        if gpus > 1:  # one job per GPU of the node, placed by the launcher
            name = f"node {gpus} gpus"
            plan.append((name, lambda: jobs_row(args, root, gpus, name=name)))
        encodings = ["rope", "t5_bias"] if args.quick else grid_encodings()
        plan += [(f"rate {pe}", lambda pe=pe: rate_row(args, root, pe)) for pe in encodings]
        for name, measure in plan:
            if name == f"jobs {jobs[0]}" and args.device == "cuda":
                torch.cuda.empty_cache()  # the jobs' processes get the memory this one cached
            try:
                row = measure()
            except Exception as error:  # say why, and go on to the next row
                first = str(error).strip().splitlines()[0] if str(error).strip() else ""
                row = Row(name, result=f"FAILED: {type(error).__name__}: {first}"[:200])
            rows.append(row)
            print(line(row), flush=True)
            if args.json is not None:  # after every row: a later failure loses nothing
                args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2))
    said, ok = judge(rows, args.quick)
    print("\n".join(said), flush=True)
    return Check(rows, ok)


def cli(argv: list[str] | None = None) -> int:
    """``main``; exit status 1 when a row failed or a target was missed."""
    return 0 if main(argv).ok else 1
