"""Section 2 (``--only encodings``): Every registered encoding's training step (pelab's own,
``benchmarks.common.PelabStep``: forward, backward, clipping, AdamW) relative to ``none`` on the
same model and batches, in interleaved rounds, with its parameter count."""

from __future__ import annotations

import copy
import statistics
import time

from benchmarks.common import PelabStep, Setup, pelab_config
from pelab.pe import PE_REGISTRY
from pelab.tokens import N_SPECIAL


def encoding_step_times(
    setup: Setup, steps: int, rounds: int, names: list[str] | None = None
) -> dict[str, dict]:
    """Median ms per training step of every 1-D encoding (2-D ones need a grid task), or of
    ``names`` beside ``none`` (the baseline of every ratio), interleaved by round."""
    # the copy task has no digits: its symbols stand in for them, so that abacus, which indexes
    # the digits of numbers, runs (its cost does not depend on which tokens are digits)
    task = copy.copy(setup.task)
    task.digit_tokens = tuple(range(N_SPECIAL, setup.vocab))
    models = {
        name: PelabStep(pelab_config(*setup.overrides, f"pe={name}"), task)
        for name, cls in sorted(PE_REGISTRY.items())
        if cls.position_dims != 2 and (not names or name in {"none", *names})
    }
    times: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(rounds):
        for name, step in models.items():
            for i in range(steps + 1):  # the first step of each round warms up
                batch = step.batch(i)
                start = time.perf_counter()
                step(batch)
                if i:
                    times[name].append(time.perf_counter() - start)
    base = statistics.median(times["none"])
    return {
        name: {
            "ms_per_step": round(1e3 * statistics.median(t), 1),
            "vs_none": round(statistics.median(t) / base, 3),
            "pe_params": models[name].model.net.num_params()["pe"],
            "attention": "eager" if models[name].model.net.pe.needs_eager_attention() else "fused",
        }
        for name, t in times.items()
    }


def section(args, setup: Setup) -> dict:
    """``encodings``: every (or ``--encodings``') 1-D encoding's ms per step against none."""
    steps_per_round, rounds = (2, 1) if setup.quick else (5, 3)
    encodings = encoding_step_times(setup, steps_per_round, rounds, args.encodings)
    print(f"\n{'encoding':<20}{'attention':>10}{'ms/step':>10}{'vs none':>9}{'PE params':>11}")
    for name, r in encodings.items():
        print(
            f"{name:<20}{r['attention']:>10}{r['ms_per_step']:>10.1f}{r['vs_none']:>9.3f}"
            f"{r['pe_params']:>11,}"
        )
    return {"encodings": encodings}
