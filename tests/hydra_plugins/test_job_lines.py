"""The line a parallel or SLURM sweep prints as a job ends: how its records say it ended (a
stack: each member's), and the sweep's progress."""

import json
import time

from hydra_plugins.pelab_launcher.job_lines import SweepClock, outcome


def write(path, **record) -> None:
    path.mkdir(parents=True)
    (path / "results.json").write_text(json.dumps({"job_type": "train", **record}))


def test_a_stack_says_how_many_of_its_runs_learned_and_a_failure_says_why(tmp_path):
    for k, learned in enumerate((True, False, True)):
        write(tmp_path / "stack" / f"seed_{k}", status="completed", learned=learned)
    assert outcome(tmp_path / "stack") == ("completed, 2 of 3 runs learned", False)
    write(tmp_path / "bad", status="failed", error="ConfigError: no\ntraceback")
    assert outcome(tmp_path / "bad") == ("failed: ConfigError: no", True)
    write(tmp_path / "budgetless", status="completed", learned=None)
    assert outcome(tmp_path / "budgetless") == ("completed", False)
    assert outcome(tmp_path / "never") == ("ended without a results.json", True)


def test_the_clock_counts_failures_and_leaves_out_the_eta_at_the_end():
    clock = SweepClock(2)
    assert clock.end(True, time.monotonic()).startswith("1/2 jobs done (1 failed), ETA ")
    assert clock.end(False, time.monotonic()) == "2/2 jobs done (1 failed)"


def test_the_eta_counts_how_far_the_running_jobs_are_and_how_many_run_at_once():
    """Issue 45: elapsed / ended x left said "ETA 8 min" with one minute left. 4 jobs of 8
    minutes, 2 at a time..."""
    now = time.monotonic()
    clock = SweepClock(4)
    clock.walls = [480.0]  # job 1 took 8 min; job 2 ends now, 8 min after it started
    clock.ended = 1
    # job 3 started 7 min ago; 1 job waits: it takes slot 2 now and ends in 8 min
    assert clock.end(False, now - 480, [now - 420], 2).endswith("ETA 8 min")
    # ... job 3 ends with job 4 running 7 min already: 1 minute left (the old pace: 5 min)
    late = SweepClock(4)
    late.walls, late.ended = [480.0, 480.0], 2
    assert late.end(False, now - 480, [now - 420], 2).endswith("ETA 60 s")
