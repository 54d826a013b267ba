"""What the launching process of a parallel or SLURM sweep says of each job, each in one line:
when it starts, and when it ends (how, learned or not, its wall time) with the sweep's progress
and ETA; the job's own output (its table) stays in its log::

    #3 started: rope_copy_s0-2_1f2e3d4c (pid 4242, output: <sweep>/.launcher/3.log)
    #3 completed, 3 of 3 runs learned after 5 min; 4/66 jobs done (0 failed), ETA 1 h 10 min
"""

import time
from pathlib import Path

from pelab.utils.console import duration


class SweepClock:
    """The jobs of a sweep ended so far, and the time the rest will take at the pace so far
    (elapsed / ended x left: jobs that run at once are in the pace)."""

    def __init__(self, total: int) -> None:
        self.total, self.ended, self.failed = total, 0, 0
        self.start = time.monotonic()

    def end(self, failed: bool) -> str:
        """Count one more job ended; ``4/66 jobs done (1 failed), ETA 9 min``."""
        self.ended += 1
        self.failed += failed
        line = f"{self.ended}/{self.total} jobs done ({self.failed} failed)"
        left = self.total - self.ended
        if left > 0:
            line += f", ETA {duration((time.monotonic() - self.start) / self.ended * left)}"
        return line


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
