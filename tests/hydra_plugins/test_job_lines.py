"""The line a parallel or SLURM sweep prints as a job ends: how its records say it ended (a
stack: each member's), and the sweep's progress."""

import json

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
    assert clock.end(True).startswith("1/2 jobs done (1 failed), ETA ")
    assert clock.end(False) == "2/2 jobs done (1 failed)"
