"""Section 2 (``--only encodings``): Every registered encoding's training step (forward, backward,
AdamW) relative to ``none`` on the same model and batches, in interleaved rounds, with its
parameter count."""

from __future__ import annotations

import statistics
import time
from functools import partial

import torch
import torch.nn.functional as F

from benchmarks.common import Setup
from pelab.model_kinds import DecoderKind
from pelab.models.transformer import Transformer
from pelab.pe import PE_REGISTRY
from pelab.tokens import N_SPECIAL


def encoding_step_times(
    batches, shape, steps: int, rounds: int, names: list[str] | None = None
) -> dict[str, dict]:
    """Median ms per training step of every 1-D encoding (2-D ones need a grid task), or of
    ``names`` beside ``none`` (the baseline of every ratio), interleaved by round."""
    task_len = 2 * shape["length"] + 2
    # the copy task has no digits: its symbols stand in for them, so that abacus, which indexes
    # the digits of numbers, runs (its cost does not depend on which tokens are digits)
    digits = tuple(range(N_SPECIAL, shape["vocab"]))
    models = {}
    for name, cls in sorted(PE_REGISTRY.items()):
        if cls.position_dims == 2 or (names and name not in {"none", *names}):
            continue
        torch.manual_seed(0)
        net = Transformer(
            shape["vocab"],
            task_len,
            True,
            partial(cls),
            d_model=shape["d"],
            n_heads=shape["heads"],
            n_layers=shape["layers"],
            digit_tokens=digits,
        )
        models[name] = (net, torch.optim.AdamW(net.parameters(), lr=1e-3))
    times: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(rounds):
        for name, (net, opt) in models.items():
            for i in range(steps + 1):  # the first step of each round warms up
                prompt, answer = batches[i]
                start = time.perf_counter()
                inputs, answer_slice = DecoderKind.teacher_forcing(prompt, answer)
                loss = F.cross_entropy(
                    net(inputs)[:, answer_slice].flatten(0, 1), answer.flatten()
                )
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                if i:
                    times[name].append(time.perf_counter() - start)
    base = statistics.median(times["none"])
    return {
        name: {
            "ms_per_step": round(1e3 * statistics.median(t), 1),
            "vs_none": round(statistics.median(t) / base, 3),
            "pe_params": models[name][0].num_params()["pe"],
            "attention": "eager" if models[name][0].pe.needs_eager_attention() else "fused",
        }
        for name, t in times.items()
    }


def section(args, setup: Setup) -> dict:
    """``encodings``: every (or ``--encodings``') 1-D encoding's ms per step against none."""
    steps_per_round, rounds = (2, 1) if setup.quick else (5, 3)
    shape = {**setup.shape, "vocab": setup.vocab}
    encodings = encoding_step_times(setup.batches, shape, steps_per_round, rounds, args.encodings)
    print(f"\n{'encoding':<20}{'attention':>10}{'ms/step':>10}{'vs none':>9}{'PE params':>11}")
    for name, r in encodings.items():
        print(
            f"{name:<20}{r['attention']:>10}{r['ms_per_step']:>10.1f}{r['vs_none']:>9.3f}"
            f"{r['pe_params']:>11,}"
        )
    return {"encodings": encodings}
