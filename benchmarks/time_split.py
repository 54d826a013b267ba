"""Section 10 (``--only time_split``): where one job's time goes, and how near its step is to this
machine's matmul peak (issue 53, item 4). Runs ``experiment=ablation_cpu pe=rope task=copy``
(its 3 seeds stacked, one torch thread; ``--quick``: 20 steps) in process and prints its
record's ``time_split_s`` (``pelab.phase_times``) as shares of its wall time; then the FLOPs of
one training step of that stack (``torch.utils.flop_counter``, forward and backward), the
step's GFLOP/s from the record's training seconds and steps, and this core's single-thread
matmul peak (a square fp32 matmul of the step's width, ``PEAK_SIZES``, the best of them),
side by side in one run; and the final test's estimate said before training
(``pelab.eval_time.estimate``) beside the test's measured seconds, for that stack and for one
member (a short run: the test's cost does not depend on the training), issue 54 item 2."""

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
from pelab.eval_time import estimate
from pelab.train import train

PEAK_SIZES = (64, 128, 256, 512)  # square matmuls: the step's widths, and larger
OVERRIDES = ["experiment=ablation_cpu", "pe=rope", "task=copy", "threads=1", "logger=none"]
QUICK = ["trainer.max_steps=20", "trainer.val_check_interval=10", "learned_at=null"]
SHORT = ["trainer.max_steps=100", "trainer.val_check_interval=100", "learned_at=null"]


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


def estimated_test_s(cfg) -> float:
    """The final test's seconds as ``cfg``'s run estimates them before training."""
    step = PelabStep(cfg)
    return estimate(step.model, step.model.task, cfg.data.eval_batch_size).total


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
        one = compose_run([*OVERRIDES, "seeds=[0]", *SHORT], Path(root) / "one")
        with contextlib.redirect_stdout(io.StringIO()):
            alone = train(one)[0]
        tests = {
            len(c.seeds): (estimated_test_s(c), r["time_split_s"]["test"])
            for c, r in ((cfg, first), (one, alone))
        }
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
    for members, (said, took) in sorted(tests.items()):
        print(
            f"  final test, {members} member(s): estimated {said:.1f} s before training, "
            f"took {took:.1f} s ({said / took:.2f}x)"
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
            "test_estimate_s": {k: {"said": a, "took": b} for k, (a, b) in tests.items()},
        }
    }
