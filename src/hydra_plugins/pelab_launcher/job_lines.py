"""What the launching process of a parallel or SLURM sweep says of each job, each in one line:
when it starts, and when it ends (how, learned or not, its wall time) with the sweep's progress
and ETA; the job's own output (its table) stays in its log::

    #3 started: rope_copy_s0-2_1f2e3d4c (pid 4242, output: <sweep>/.launcher/3.log)
    #3 completed, 3 of 3 runs learned after 5 min; 4/66 jobs done (0 failed), ETA 1 h 10 min
"""

import os
import sys
import time
from pathlib import Path

from pelab.utils.console import duration


def launched_script() -> str:
    """The script this sweep was launched with, relative to here (for a resume command)."""
    return os.path.relpath(sys.argv[0]) if sys.argv and sys.argv[0] else "scripts/train.py"


class SweepClock:
    """The jobs of a sweep ended so far, and when the rest will have ended: each job taking the
    mean wall time of those ended, the running ones that time from their own start, the waiting
    ones queued on ``slots`` jobs at once (elapsed / ended x left would say "ETA 8 min" with one
    minute left: it ignores how far the running jobs are)."""

    def __init__(self, total: int) -> None:
        self.total, self.ended, self.failed = total, 0, 0
        self.walls: list[float] = []  # each ended job's wall time

    def end(self, failed: bool, started: float, running: list[float] = (), slots: int = 1) -> str:
        """Count one more job ended (it started at ``started``, ``time.monotonic``; ``running``:
        the start times of the jobs still running; ``slots``: how many run at once);
        ``4/66 jobs done (1 failed), ETA 9 min``."""
        now = time.monotonic()
        self.ended += 1
        self.failed += failed
        self.walls.append(now - started)
        line = f"{self.ended}/{self.total} jobs done ({self.failed} failed)"
        if self.ended < self.total:
            line += f", ETA {duration(self.left(now, list(running), max(slots, 1)))}"
        return line

    def left(self, now: float, running: list[float], slots: int) -> float:
        """Seconds until the last job ends, each taking the mean wall time so far."""
        mean = sum(self.walls) / len(self.walls)
        free = [max(mean - (now - start), 0.0) for start in running]  # when each slot frees
        free += [0.0] * max(slots - len(running), 0)
        waiting = self.total - self.ended - len(running)
        for _ in range(max(waiting, 0)):
            free.sort()
            free[0] += mean
        return max(free, default=0.0)


def outcome(output_dir: Path) -> tuple[str, bool]:
    """How the job's records say it ended, and whether it failed: ``completed, learned at step
    1200``, ``completed, not learned``, ``completed, 2 of 3 runs learned`` (a stack: a record per
    member), ``completed`` (no competence budget), or ``failed: <why>`` (any status but
    completed)."""
    from pelab.record import RESULTS, read_record

    paths = sorted(output_dir.rglob(RESULTS)) if output_dir.is_dir() else []
    if not paths:
        return "ended without a results.json", True
    records = [read_record(path) for path in paths]
    failed = [r for r in records if r["status"] != "completed"]
    if failed:
        error = str(failed[0].get("error", "")).split("\n")[0]
        return (f"{failed[0]['status']}: {error}" if error else failed[0]["status"]), True
    learned = [r.get("learned") for r in records]
    if all(v is None for v in learned):
        said = "completed"
    elif len(records) == 1:
        step = records[0].get("steps_to_learn")
        said = f"completed, learned at step {step}" if learned[0] else "completed, not learned"
    else:
        said = f"completed, {sum(v is True for v in learned)} of {len(records)} runs learned"
    return said, False
