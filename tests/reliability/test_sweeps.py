"""Sweeps left overnight: a diverging job fails fast with its reason while the others keep their
results, and re-running the same sweep (same ``hydra.sweep.dir``) with ``skip_completed=true``
skips finished jobs, resumes interrupted ones and runs the rest."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from pelab.reliability.resume.callbacks import TrainingDiverged
from pelab.train import train
from tests import zygote
from tests.reliability.runs import (
    SWEEP_ENV,
    checkpoint,
    config,
    fault,
    results,
    sweep_cli,
    sweep_command,
    sweep_job,
)

pytestmark = pytest.mark.faults  # the fault campaign: make test-faults

DIVERGING = ["model.optimizer.lr=1e30", "model.schedule.warmup_steps=1"]


@pytest.mark.integration
def test_a_diverging_run_stops_at_the_first_nan_and_records_why(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(TrainingDiverged, match=r"train/loss is (nan|inf) at step \d"):
        train(config(tmp_path, out, *DIVERGING))
    record = results(out)
    assert record["status"] == "failed"
    assert "training diverged" in record["error"] and "model.optimizer.lr" in record["error"]
    assert not (out / "checkpoints" / "last.ckpt").exists()  # stopped before the first validation


@pytest.mark.processes
@pytest.mark.integration
def test_rerunning_a_sweep_skips_completed_jobs_resumes_killed_ones_and_records_failures(
    tmp_path, repo_root
):
    sweep = tmp_path / "sweep"
    # job 0: finished before, job 1: killed before, job 2: diverges; written as Hydra writes a
    # swept value into the job's overrides (3e-3 -> 0.003), which its directory's key hashes
    lrs = ["0.003", "0.002", "1e+30"]
    warmup = "model.schedule.warmup_steps=1"
    done, killed, diverging = (
        sweep_job(sweep, "rope", "copy", 0, f"model.optimizer.lr={lr}", warmup) for lr in lrs
    )
    train(config(tmp_path, done, f"model.optimizer.lr={lrs[0]}", warmup))
    finished = (done / "results.json").read_bytes()
    with pytest.raises(RuntimeError, match="injected"):
        train(config(tmp_path, killed, f"model.optimizer.lr={lrs[1]}", warmup, *fault("raise", 6)))

    proc = sweep_cli(
        repo_root,
        tmp_path,
        sweep,
        f"model.optimizer.lr={','.join(lrs)}",
        warmup,
        "skip_completed=true",
    )
    assert proc.returncode == 1, proc.stderr[-3000:]  # one job did not complete
    assert (done / "results.json").read_bytes() == finished  # skipped: not run again
    resumed = results(killed)
    assert resumed["status"] == "completed"
    assert resumed["resumed_from"] == str(killed / "checkpoints" / "last.ckpt")
    assert checkpoint(killed / "checkpoints" / "last.ckpt")["global_step"] == 8
    diverged = results(diverging)
    assert diverged["status"] == "failed" and "training diverged" in diverged["error"]
    assert diverging.name in proc.stderr and "training diverged" in proc.stderr  # the summary


@pytest.mark.processes
@pytest.mark.integration
def test_a_job_killed_in_a_live_parallel_sweep_is_recorded_and_the_others_run_on(
    tmp_path, repo_root
):
    """SIGKILL (an out-of-memory kill) of one job of a local parallel sweep: the others complete,
    the killed one's results.json says ``failed``, by which signal, with the tail of its output;
    the summary names it and the sweep exits with status 1. The same command with
    ``skip_completed=true`` then resumes it and leaves the others untouched."""
    sweep = tmp_path / "sweep"

    def launch(*extra: str) -> subprocess.CompletedProcess:
        parallel = ["hydra/launcher=parallel", "hydra.launcher.n_jobs=2"]
        return sweep_cli(repo_root, tmp_path, sweep, *parallel, "seed=0,1,2", *extra)

    # the job of seed 1 kills itself at step 6 (after its first validation's checkpoint)
    first = launch(*fault("sigkill", 6, seed=1))
    jobs = [sweep_job(sweep, "rope", "copy", seed, f"seed={seed}") for seed in range(3)]
    assert first.returncode == 1, first.stderr[-3000:]
    records = [results(job) for job in jobs]
    # seed 2 starts in the slot the killed job left: the pool outlives a killed worker
    assert [r["status"] for r in records] == ["completed", "failed", "completed"]
    killed = records[1]
    assert killed["error"].startswith("killed by SIGKILL (out of memory, or killed from outside)")
    assert "skip_completed=true" in killed["error"]
    assert any("injecting fault 'sigkill' at step 6" in line for line in killed["log_tail"])
    assert "1 of 3 jobs did not complete" in first.stderr
    assert f"failed: {jobs[1].name}: killed by SIGKILL" in first.stderr  # the summary names it
    before = {job: (job / "results.json").read_bytes() for job in jobs if job != jobs[1]}

    second = launch(*fault("sigkill", 99999), "skip_completed=true")
    assert second.returncode == 0, second.stderr[-3000:]
    resumed = results(jobs[1])
    assert resumed["status"] == "completed"
    assert resumed["resumed_from"] == str(jobs[1] / "checkpoints" / "last.ckpt")
    assert all((job / "results.json").read_bytes() == data for job, data in before.items())


@pytest.mark.processes
@pytest.mark.integration
def test_sigterm_to_a_parallel_sweep_reaches_its_running_jobs_which_checkpoint(
    tmp_path, repo_root
):
    """A pre-empted sweep (SIGTERM to the launching process) passes the signal on: the running
    job saves a checkpoint at the end of its step and records ``interrupted`` (by SIGTERM); jobs
    not started stay so."""
    sweep = tmp_path / "sweep"
    marker = tmp_path / "training"
    LONG = ["trainer.max_steps=100000", "trainer.val_check_interval=50000"]
    cmd = sweep_command(
        repo_root,
        tmp_path,
        sweep,
        "hydra/launcher=parallel",
        "hydra.launcher.n_jobs=1",
        "seed=0,1",
        *LONG,
        *fault("mark", 6, marker=marker, seed=0),
    )
    env = {**os.environ, **SWEEP_ENV}
    proc = zygote.start(
        cmd, cwd=repo_root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 300
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marker.exists(), proc.communicate()[1][-3000:]
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode != 0
    first, second = (sweep_job(sweep, "rope", "copy", s, f"seed={s}", *LONG) for s in (0, 1))
    record = results(first)
    assert record["status"] == "interrupted", stderr  # issue 35 item 8's status
    assert "interrupted by SIGTERM" in record["error"]
    assert checkpoint(first / "checkpoints" / "last.ckpt")["global_step"] > 6
    assert not second.exists()  # never started
    # issue 45: the command that resumes the whole sweep, not the one job, said by the launcher
    # and kept in the interrupted job's record
    said_by_launcher = stdout + stderr
    assert "sweep interrupted: 0 jobs ended, 1 stopped, 1 not started" in said_by_launcher
    resume = "-m hydra/launcher=parallel hydra.launcher.n_jobs=1 "
    for said in (said_by_launcher, record["error"]):
        assert resume in said and "seed=0,1 " in said, said[-2000:]
        assert f"hydra.sweep.dir={sweep} skip_completed=true" in said
        assert "the jobs not started yet run" in said


@pytest.mark.processes
@pytest.mark.integration
def test_a_killed_job_of_a_parallel_evaluation_sweep_is_recorded_through_its_link(
    tmp_path, repo_root
):
    """``eval.py -m`` jobs live in ``<sweep>/<num>/`` (the launcher resolves ``hydra.job.num``)
    and link to their record beside the checkpoint: a job killed during its test is recorded
    there as failed, by SIGKILL, and the summary names it."""
    out = tmp_path / "run"
    train(config(tmp_path, out))
    sweep = tmp_path / "eval_sweep"
    cmd = [
        "scripts/eval.py",
        "-m",
        "hydra/launcher=parallel",
        f"ckpt_path={out / 'checkpoints' / 'best.ckpt'}",
        "pe.scaling=linear,ntk",
        "pe.scaling_factor=2",
        "logger=none",
        f"hydra.sweep.dir={sweep}",
        *fault("sigkill", 0, during="test"),
    ]
    proc = zygote.run(cmd, cwd=repo_root, env={**os.environ, **SWEEP_ENV}, timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]
    for num in (0, 1):
        link = sweep / str(num) / "results.json"
        assert link.is_symlink() and link.resolve().is_relative_to(out / "eval")
        record = json.loads(link.read_text())
        assert record["status"] == "failed" and record["error"].startswith("killed by SIGKILL")
    assert "2 of 2 jobs did not complete" in proc.stderr
