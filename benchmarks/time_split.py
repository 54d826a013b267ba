"""Section 10 (``--only time_split``): where one job's time goes, and how near its step is to this
machine's matmul peak (issue 53, item 4). Runs ``experiment=ablation_cpu pe=rope task=copy``
(its 3 seeds stacked, one torch thread; ``--quick``: 20 steps) in process and prints its
record's ``time_split_s`` (``pelab.phase_times``) as shares of its wall time; then the FLOPs of
one training step of that stack (``torch.utils.flop_counter``, forward and backward), the
step's GFLOP/s from the record's training seconds and steps, and this core's single-thread
matmul peak (a square fp32 matmul of the step's width, ``PEAK_SIZES``, the best of them),
side by side in one run."""

from __future__ import annotations

import contextlib
import io
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.common import PelabStep
from benchmarks.gpu_check import compose_run
from pelab.train import train

PEAK_SIZES = (64, 128, 256, 512)  # square matmuls: the step's widths, and larger
OVERRIDES = ["experiment=ablation_cpu", "pe=rope", "task=copy", "threads=1", "logger=none"]
QUICK = ["trainer.max_steps=20", "trainer.val_check_interval=10", "learned_at=null"]


def matmul_peak(seconds: float = 0.5) -> float:
    """The best GFLOP/s of one thread's fp32 matmul over ``PEAK_SIZES``."""
    best = 0.0
    for n in PEAK_SIZES:
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b  # warm-up
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            a @ b
            calls += 1
        best = max(best, 2 * n**3 * calls / (time.perf_counter() - start) / 1e9)
    return best


def step_flops(cfg) -> float:
    """FLOPs of one training step of ``cfg``'s stack (forward and backward)."""
    step = PelabStep(cfg)
    with FlopCounterMode(display=False) as counter:
        step(step.batch(0))
    return float(counter.get_total_flops())


def section(args, setup) -> dict:
    """``time_split``: the job's phases (seconds and shares of its wall time), its step's GFLOP/s
    and the matmul peak."""
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as root:
        cfg = compose_run([*OVERRIDES, *(QUICK if setup.quick else [])], Path(root))
        with contextlib.redirect_stdout(io.StringIO()):  # the run's own table
            first = train(cfg)[0]
        flops = step_flops(compose_run(OVERRIDES, Path(root) / "flops"))
    split, wall = first["time_split_s"], first["member_of"]["fit_time_s"] or first["wall_time_s"]
    steps = split["steps"]
    per_step = split["training"] / max(steps, 1)
    achieved, peak = flops / per_step / 1e9, matmul_peak(0.1 if setup.quick else 0.5)
    print(f"\none job ({' '.join(OVERRIDES[:3])}, 3 seeds stacked): {wall:.1f} s")
    for phase in ("startup", "training", "validation", "test"):
        print(f"  {phase:>10}: {split[phase]:7.1f} s  {split[phase] / wall:6.1%}")
    print(f"  validations: {split['validations']}, {steps} steps")
    print(
        f"  step: {flops / 1e9:.3f} GFLOP in {per_step * 1e3:.1f} ms = {achieved:.1f} GFLOP/s, "
        f"{achieved / peak:.1%} of this core's matmul peak ({peak:.0f} GFLOP/s)"
    )
    shares = {
        phase: split[phase] / wall for phase in ("startup", "training", "validation", "test")
    }
    return {
        "time_split": {
            "wall_s": wall,
            "seconds": split,
            "shares": shares,
            "step_gflop": flops / 1e9,
            "step_gflops_per_s": achieved,
            "matmul_peak_gflops_per_s": peak,
        }
    }
