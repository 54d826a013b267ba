"""Section 9 (``--only validation``): what one validation costs against the 100 training
steps it follows (issue 53, item 1). ``experiment=ablation_cpu pe=<each> task=copy``, its 3
seeds stacked, one torch thread: 100 training steps (``common.PelabStep``) beside one
validation of the run's validation set (256 sequences at each in-distribution length, 4 and 8)
scored as validation does now, by one teacher-forced pass (``SequenceModel.correct(...,
one_pass=True)``), and as it did before, by greedy decoding with the key/value cache; in
interleaved rounds, medians. Goal: a validation at most ``GOAL`` (0.05) of its 100 steps."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import PelabStep
from benchmarks.gpu_check import compose_run
from pelab.assembly import data_module

GOAL = 0.05
STEPS = 100
ENCODINGS = ("rope", "alibi", "t5_bias")  # --quick: rope alone


def times(pe: str, rounds: int, steps: int) -> dict[str, float]:
    """Median seconds of ``steps`` training steps, of one validation by one pass and of one by
    greedy decoding, for ``pe`` (``rounds`` interleaved rounds)."""
    with tempfile.TemporaryDirectory() as root:
        overrides = ["experiment=ablation_cpu", f"pe={pe}", "task=copy", "threads=1"]
        cfg = compose_run([*overrides, "logger=none"], Path(root))
        step = PelabStep(cfg)
        model = step.model
        data = data_module(cfg, model.task, [m.seed for m in model.members])
        data.cache_dir = Path(root) / "cache"
        loaders = data.val_dataloader()
        members = list(range(len(model.members)))
        lengths = model.lengths["val"]
        count = iter(range(10**9))

        def train() -> None:
            model.train()
            for _ in range(steps):
                step(step.batch(next(count)))

        def validate(one_pass: bool) -> None:
            model.eval()
            for length, loader in zip(lengths, loaders, strict=True):
                for index, batch in enumerate(loader):
                    model.correct(
                        batch["prompt"], batch["answer"], length, index, members, one_pass
                    )

        sides = {
            "steps": train,
            "one pass": lambda: validate(True),
            "greedy": lambda: validate(False),
        }
        for side in sides.values():  # warm-up
            side()
        seconds: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(rounds):
            for name, side in sides.items():
                start = time.perf_counter()
                side()
                seconds[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in seconds.items()}


def section(args, setup) -> dict:
    """``validation``: per encoding the seconds of 100 steps, of a validation by one pass and
    by greedy decoding, and each validation's share of the 100 steps."""
    torch.set_num_threads(1)
    encodings = ENCODINGS[:1] if setup.quick else ENCODINGS
    rounds, steps = (1, 10) if setup.quick else (3, STEPS)
    print(
        f"\n{'pe':>10}{f'{steps} steps s':>14}{'one pass s':>12}{'greedy s':>10}"
        f"{'one pass/steps':>16}{'greedy/steps':>14}"
    )
    out = {}
    for pe in encodings:
        t = times(pe, rounds, steps)
        row = {
            "steps_s": t["steps"],
            "one_pass_s": t["one pass"],
            "greedy_s": t["greedy"],
            "one_pass_share": t["one pass"] / t["steps"] * steps / STEPS,
            "greedy_share": t["greedy"] / t["steps"] * steps / STEPS,
        }
        print(
            f"{pe:>10}{t['steps']:>14.2f}{t['one pass']:>12.3f}{t['greedy']:>10.3f}"
            f"{row['one_pass_share']:>16.3f}{row['greedy_share']:>14.3f}"
        )
        out[pe] = row
    return {"validation": out, "validation_goal": GOAL}
