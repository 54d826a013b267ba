"""The end-of-sweep summary: every job that did not complete is named; failures exit 1."""

import json

import pytest
from omegaconf import OmegaConf

from pelab.analysis.sweep import SweepSummary
from tests.analysis.records import CHOICES, record, write_job, write_multirun


def sweep_end(sweep):
    SweepSummary().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}}))


def test_a_sweep_with_a_failed_and_a_missing_job_names_them_and_exits_1(tmp_path, capsys):
    write_multirun(tmp_path, {}, ["pe=none,alibi", "seed=0"])
    choices = {"pe": "none", "task": "copy", **CHOICES}
    write_job(
        tmp_path / "0_none",
        record("none", "copy", 0, status="failed"),
        choices,
        0,
        ["pe=none", "seed=0"],
    )
    with pytest.raises(SystemExit, match="2 of 2 jobs did not complete"):
        sweep_end(tmp_path)
    err = capsys.readouterr().err
    assert "2 jobs: 1 failed, 1 missing" in err
    assert "failed: 0_none: ConfigError: deliberately broken" in err
    assert f"python scripts/make_table.py {tmp_path}" in err


def test_a_complete_sweep_ends_normally(tmp_path, capsys):
    write_multirun(tmp_path, {}, ["pe=none", "seed=0"])
    choices = {"pe": "none", "task": "copy", **CHOICES}
    done = record("none", "copy", 0, {8: 1.0, 32: 0.0})
    write_job(tmp_path / "0_none", done, choices, 0, ["pe=none", "seed=0"])
    sweep_end(tmp_path)
    assert "1 jobs: 1 completed" in capsys.readouterr().err


def test_a_sweep_of_stacks_counts_its_jobs_and_their_members_runs(tmp_path, capsys):
    write_multirun(tmp_path, {}, ["pe=none", "seeds=[0,1]"])
    choices = {"pe": "none", "task": "copy", **CHOICES}
    job = write_job(tmp_path / "none_copy", None, choices, 0, ["pe=none", "seeds=[0,1]"])
    for seed, status in ((0, "completed"), (1, "failed")):
        member = record("none", "copy", seed, {8: 1.0, 32: 0.0}, status=status)
        member["member_of"] = {"seeds": [0, 1], "learning_rates": None, "directory": str(job)}
        (job / f"seed_{seed}").mkdir()
        (job / f"seed_{seed}" / "results.json").write_text(json.dumps(member))
    with pytest.raises(SystemExit, match="1 of 2 runs did not complete"):
        sweep_end(tmp_path)
    assert "1 jobs (2 runs): 1 completed, 1 failed" in capsys.readouterr().err


def test_a_stack_that_never_started_counts_as_one_job(tmp_path, capsys):
    write_multirun(tmp_path, {"pe": "none,alibi"}, ["seeds=[0,1,2]"])
    choices = {"pe": "none", "task": "copy", **CHOICES}
    job = write_job(tmp_path / "none_copy", None, choices, 0, ["pe=none", "seeds=[0,1,2]"])
    for seed in range(3):
        member = record("none", "copy", seed, {8: 1.0, 32: 0.0})
        member["member_of"] = {"seeds": [0, 1, 2], "learning_rates": None, "directory": str(job)}
        (job / f"seed_{seed}").mkdir()
        (job / f"seed_{seed}" / "results.json").write_text(json.dumps(member))
    with pytest.raises(SystemExit, match="3 of 6 runs did not complete"):
        sweep_end(tmp_path)
    assert "2 jobs (6 runs): 3 completed, 3 missing" in capsys.readouterr().err


def test_a_sweep_counts_its_learned_and_not_learned_runs(tmp_path, capsys):
    write_multirun(tmp_path, {}, ["pe=none,rope", "seed=0"])
    for i, (pe, learned) in enumerate((("none", False), ("rope", True))):
        choices = {"pe": pe, "task": "copy", **CHOICES}
        done = record(pe, "copy", 0, {8: 1.0, 32: 0.0}, learned=learned, steps_to_learn=None)
        write_job(tmp_path / f"{i}_{pe}", done, choices, 0, [f"pe={pe}", "seed=0"])
    sweep_end(tmp_path)
    err = capsys.readouterr().err
    assert "learned: 1 of 2 completed runs; not learned: 1 (0_none)" in err


def test_a_sweep_names_its_first_not_learned_runs_and_counts_the_rest(tmp_path, capsys):
    from pelab.analysis.sweep import NAMED

    seeds = list(range(NAMED + 2))
    write_multirun(tmp_path, {}, ["pe=none", f"seed={','.join(map(str, seeds))}"])
    for seed in seeds:
        choices = {"pe": "none", "task": "copy", **CHOICES}
        done = record("none", "copy", seed, {8: 0.5, 32: 0.0}, learned=False, steps_to_learn=None)
        write_job(tmp_path / f"{seed}_none", done, choices, seed, ["pe=none", f"seed={seed}"])
    sweep_end(tmp_path)
    err = capsys.readouterr().err
    named = ", ".join(f"{seed}_none" for seed in seeds[:NAMED])
    assert f"not learned: {NAMED + 2} ({named}, and 2 more (make_table.py --list))" in err


def test_each_finished_job_of_a_sweep_prints_its_progress_and_an_eta(tmp_path, capsys):
    import os
    import time

    write_multirun(tmp_path, {}, ["pe=none,alibi", "seed=0,1"])
    started = time.time() - 60
    os.utime(tmp_path / "multirun.yaml", (started, started))
    choices = {"pe": "none", "task": "copy", **CHOICES}
    done = record("none", "copy", 0, {8: 1.0, 32: 0.0})
    failed = record("none", "copy", 1, status="failed")
    write_job(tmp_path / "0_none_s0", done, choices, 0, ["pe=none", "seed=0"])
    write_job(tmp_path / "1_none_s1", failed, choices, 1, ["pe=none", "seed=1"])
    SweepSummary().progress(tmp_path)
    err = capsys.readouterr().err
    assert "sweep progress: 2/4 jobs done (1 failed), ETA 1 min" in err


def test_an_interrupted_job_is_not_done_until_it_resumes(tmp_path, capsys):
    """A re-run sweep: its completed job ends (skipped) while the interrupted one waits to
    resume, its record still saying interrupted."""
    write_multirun(tmp_path, {}, ["pe=none", "seed=0,1"])
    choices = {"pe": "none", "task": "copy", **CHOICES}
    done = record("none", "copy", 0, {8: 1.0, 32: 0.0})
    stopped = record("none", "copy", 1, status="interrupted")
    write_job(tmp_path / "0_none_s0", done, choices, 0, ["pe=none", "seed=0"])
    write_job(tmp_path / "1_none_s1", stopped, choices, 1, ["pe=none", "seed=1"])
    SweepSummary().progress(tmp_path)
    err = capsys.readouterr().err
    assert "sweep progress: 1/2 jobs done (0 failed, 1 interrupted, to resume), ETA" in err
