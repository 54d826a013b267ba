"""Section 7 (``--ablation``): the wall time of ``experiment=ablation_cpu`` (every job, on this
machine) and the share of its (encoding, task) cells learned in distribution."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import Setup
from pelab.analysis.collect import directory_records
from pelab.analysis.frames import runs_frame


def ablation_wall_time(out: Path) -> dict:
    """``experiment=ablation_cpu`` run whole into ``out``: its wall time and learned cells."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "scripts/train.py", "experiment=ablation_cpu", f"hydra.sweep.dir={out}"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    runs = runs_frame(directory_records(out))
    done = runs[runs["status"] == "completed"]
    cells = done.groupby(["pe", "task"])["learned"].agg(lambda v: bool(v.all()))
    return {
        "wall_s": round(wall),
        "exit_status": proc.returncode,
        "runs": len(runs),
        "completed": len(done),
        "cells": len(cells),
        "cells_learned": int(cells.sum()),
    }


def section(args, setup: Setup) -> dict:
    """``ablation_cpu``: the preset's wall time and its cells learned in distribution."""
    a = ablation_wall_time(setup.tmp / "ablation_cpu")
    print(
        f"\nexperiment=ablation_cpu: {a['wall_s']} s wall, {a['completed']}/{a['runs']} runs "
        f"completed, {a['cells_learned']}/{a['cells']} cells learned in distribution"
    )
    return {"ablation_cpu": a}
