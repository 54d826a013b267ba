"""Section 7 (``startup``): seconds from a command's start to its answer, for the commands that
answer before any work: the scripts' ``--help``, ``--cfg job``, a misspelt choice (Hydra's
error) and a bad value (pelab's checks, which import the model's code), then a one-step run of
the default config (start-up, one step, a test at one length) as the yardstick. Each command
runs ``runs`` times in turn; the best and the median wall time are reported (the best: what the
command costs on this machine when nothing else competes). Target (issue 35): at most 1.5 s
for ``--help``, ``--cfg`` and a Hydra error on 2 cores."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from benchmarks.common import Setup

# label -> the command line after ``python``; {out}: a scratch directory
COMMANDS = {
    "train --help": ["scripts/train.py", "--help"],
    "train --cfg job": ["scripts/train.py", "--cfg", "job"],
    "train pe=rop (a misspelt choice)": ["scripts/train.py", "pe=rop"],
    "eval --help": ["scripts/eval.py", "--help"],
    "inspect_pe --help": ["scripts/inspect_pe.py", "--help"],
    "make_table --help": ["scripts/make_table.py", "--help"],
    "train model.net.n_heads=5 (a bad value)": [
        "scripts/train.py",
        "model.net.n_heads=5",
        "logger=none",
        "hydra.run.dir={out}/refused",
    ],
    "train, one step": [
        "scripts/train.py",
        "trainer.max_steps=1",
        "task.eval_lengths=[8]",
        "task.n_test=8",
        "logger=none",
        "hydra.run.dir={out}/one_step",
    ],
}
QUICK = ("train --help", "train pe=rop (a misspelt choice)")


def wall_time(args: list[str]) -> float:
    """Seconds ``python <args>`` takes from its start to its exit (its status is not checked:
    the refused commands exit 1 by design)."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, *args], stdin=subprocess.DEVNULL, capture_output=True, check=False
    )
    return time.perf_counter() - start


def section(args, setup: Setup) -> dict:
    """``startup``: each command's best and median seconds over the rounds, run in turn."""
    labels = QUICK if setup.quick else tuple(COMMANDS)
    runs = 1 if setup.quick else max(setup.rounds, 5)
    times: dict[str, list[float]] = {label: [] for label in labels}
    for _ in range(runs):
        for label in labels:
            command = [a.format(out=setup.tmp / "startup") for a in COMMANDS[label]]
            times[label].append(wall_time(command))
    print(f"\nStart-up: seconds to answer, best and median of {runs} runs")
    report = {}
    for label, seconds in times.items():
        best, median = min(seconds), statistics.median(seconds)
        print(f"  {label:<44} {best:6.2f} {median:6.2f}")
        report[label] = {"best_s": round(best, 3), "median_s": round(median, 3), "runs": runs}
    return {"startup": report}
