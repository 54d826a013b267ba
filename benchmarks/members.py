"""Section 5 (``--only members``): Members (``seeds=[...]``): the aggregate training throughput of
K = 1, 2, 4, 8 members in one stacked network (``pelab.models.stacked``) against K single-member
models stepped one after another (same models, same batches; one torch thread, as one job per
core runs), for ``none``, ``rope``, ``alibi``, ``t5_bias`` (parameters stacked over the
members) and ``shaw`` (eager attention), at the CPU presets' shape (d_model 64, 2 layers, batch
32, copy at lengths 1-8), beside the bound: one model with K times the batch. Every side takes
pelab's own training step (``benchmarks.common.PelabStep``)."""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import PelabStep, Setup, pelab_config, shape_overrides
from pelab.models.member_encodings import MemberEncodings
from pelab.threads import set_threads

MEMBER_ENCODINGS = ("none", "rope", "alibi", "t5_bias", "shaw")  # t5_bias, shaw: parameters
MEMBER_COUNTS = (1, 2, 4, 8)
DEFAULT_RUN = "rope, batch 64, 1-16"  # the default run's shape, as seeds=[0,1,2] trains it


def member_throughput(quick: bool) -> dict[str, dict]:
    """Member steps per second of K members in one stacked network, K single-member models
    stepped one after another and the bound (one model, K x the batch), interleaved by round,
    one torch thread (as one job per core runs)."""
    threads = torch.get_num_threads()
    set_threads(1, None)
    encodings, counts = (("none", "rope"), (1, 2)) if quick else (MEMBER_ENCODINGS, MEMBER_COUNTS)
    steps, rounds = (2, 1) if quick else (20, 3)
    results: dict[str, dict] = {}
    try:
        for pe in encodings:
            results[pe] = {}
            for k in counts:
                results[pe][k] = _member_sides(pe, k, steps, rounds)
        if not quick:  # the default run's shape: batch 64, copy at lengths 1-16, seeds=[0,1,2]
            results[DEFAULT_RUN] = {3: _member_sides("rope", 3, steps, rounds, 64, (1, 16))}
    finally:
        set_threads(threads, None)
    return results


def _member_step(pe: str, seeds: list[int], batch: int, lengths: tuple[int, int]) -> PelabStep:
    """pelab's step of the CPU presets' decoder (d_model 64, 2 layers) of ``seeds``, stacked as
    training stacks them (one member: a plain run), on copy at ``lengths``."""
    low, high = lengths
    return PelabStep(
        pelab_config(
            *shape_overrides(64, 2, batch),
            f"pe={pe}",
            f"task.train_lengths=[{low},{high}]",
            f"task.eval_lengths=[{high}]",
            f"seeds=[{','.join(map(str, seeds))}]",
        )
    )


def _member_sides(
    pe: str, k: int, steps: int, rounds: int, batch: int = 32, lengths: tuple[int, int] = (1, 8)
) -> dict:
    seeds = list(range(k))
    sides = {
        "stacked": [_member_step(pe, seeds, batch, lengths)],
        "sequential": [_member_step(pe, [seed], batch, lengths) for seed in seeds],
        "bound": [_member_step(pe, [0], batch * k, lengths)],
    }
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(rounds):  # the sides alternate, so drifts of the machine hit them alike
        for name, stepped in sides.items():
            for step in stepped:
                step(step.batch(0))  # warm-up
            for i in range(1, steps + 1):
                batches = [step.batch(i) for step in stepped]
                start = time.perf_counter()
                for step, batch in zip(stepped, batches, strict=True):
                    step(batch)
                times[name].append(time.perf_counter() - start)
    per_s = {name: k / statistics.median(t) for name, t in times.items()}
    return {
        "stacked_encodings": sum(
            isinstance(m, MemberEncodings) for m in sides["stacked"][0].model.modules()
        ),
        **{f"{name}_member_steps_per_s": round(v, 1) for name, v in per_s.items()},
        "stacked_vs_sequential": round(per_s["stacked"] / per_s["sequential"], 3),
        "bound_vs_sequential": round(per_s["bound"] / per_s["sequential"], 3),
        "stacked_vs_bound": round(per_s["stacked"] / per_s["bound"], 3),
    }


STACK_RUN = [  # the default run (pe=rope task=copy), a fixed budget, nothing logged
    "trainer.max_steps=400",
    "learned_at=null",
    "logger=none",
    "trainer.enable_progress_bar=false",
]


def stack_wall_time(out: Path, seeds: tuple[int, ...] = (0, 1, 2)) -> dict:
    """Wall seconds of ``seeds=[...]`` as one job against the single runs of those seeds one
    after another (the same config, each a fresh process, as a user runs them)."""

    def timed(*overrides: str) -> float:
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "scripts/train.py", *STACK_RUN, *overrides],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=True,
        )
        return time.perf_counter() - start

    listed = ",".join(map(str, seeds))
    stacked = timed(f"seeds=[{listed}]", f"hydra.run.dir={out}/stack")
    singles = [timed(f"seed={seed}", f"hydra.run.dir={out}/seed_{seed}") for seed in seeds]
    return {
        "seeds": list(seeds),
        "stack_s": round(stacked, 1),
        "singles_s": [round(t, 1) for t in singles],
        "stack_vs_singles": round(stacked / sum(singles), 3),
        "stack_vs_one": round(stacked / statistics.median(singles), 2),
    }


def section(args, setup: Setup) -> dict:
    """``members``: stacked against sequential against the bound per encoding and K; with
    ``--stack-wall``, ``stack_wall``: seeds=[0,1,2] as one job against its single runs."""
    report = {"members": (members := member_throughput(setup.quick))}
    print(
        f"\n{'members (1 thread)':<20}{'K':>3}{'stacked/s':>11}{'sequential/s':>14}"
        f"{'bound/s':>9}{'stacked vs seq':>16}{'bound vs seq':>14}{'stacked vs bound':>18}"
    )
    for pe, by_k in members.items():
        for k, r in by_k.items():
            print(
                f"{pe:<20}{k:>3}{r['stacked_member_steps_per_s']:>11.1f}"
                f"{r['sequential_member_steps_per_s']:>14.1f}"
                f"{r['bound_member_steps_per_s']:>9.1f}"
                f"{r['stacked_vs_sequential']:>16.3f}{r['bound_vs_sequential']:>14.3f}"
                f"{r['stacked_vs_bound']:>18.3f}"
            )
    if args.stack_wall:
        with tempfile.TemporaryDirectory() as scratch:
            report["stack_wall"] = wall = stack_wall_time(Path(scratch))
        print(
            f"seeds={wall['seeds']} as one job: {wall['stack_s']} s; the single runs one "
            f"after another: {' + '.join(map(str, wall['singles_s']))} s "
            f"({wall['stack_vs_singles']}x of their sum, {wall['stack_vs_one']}x one run)"
        )
    return report
