"""Sweeps left overnight: a diverging job fails fast with its reason while the others keep their
results, and re-running the same sweep (same ``hydra.sweep.dir``) with ``skip_completed=true``
skips finished jobs, resumes interrupted ones and runs the rest."""

from __future__ import annotations

import subprocess

import pytest

from pelab.reliability.callbacks import TrainingDiverged
from pelab.train import run
from tests.reliability.runs import checkpoint, config, fault, results, sweep_cli, sweep_job

DIVERGING = ["model.optimizer.lr=1e30", "model.schedule.warmup_steps=1"]


def test_a_diverging_run_stops_at_the_first_nan_and_records_why(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(TrainingDiverged, match=r"train/loss is (nan|inf) at step \d"):
        run(config(tmp_path, out, *DIVERGING))
    record = results(out)
    assert record["status"] == "failed"
    assert "training diverged" in record["error"] and "model.optimizer.lr" in record["error"]
    assert not (out / "checkpoints" / "last.ckpt").exists()  # stopped before the first validation


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
    run(config(tmp_path, done, f"model.optimizer.lr={lrs[0]}", warmup))
    finished = (done / "results.json").read_bytes()
    with pytest.raises(RuntimeError, match="injected"):
        run(config(tmp_path, killed, f"model.optimizer.lr={lrs[1]}", warmup, *fault("raise", 6)))

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


def test_a_job_killed_in_a_live_parallel_sweep_loses_nothing_after_a_rerun(tmp_path, repo_root):
    """SIGKILL (an out-of-memory kill) of one joblib worker ends that launch: Hydra's joblib
    launcher cannot go on without the worker. What finished keeps its results.json, and the same
    command with ``skip_completed=true`` skips it, resumes or reruns the rest: every job ends."""
    sweep = tmp_path / "sweep"

    def launch(*extra: str) -> subprocess.CompletedProcess:
        parallel = ["hydra/launcher=parallel", "hydra.launcher.n_jobs=2"]
        return sweep_cli(repo_root, tmp_path, sweep, *parallel, "seed=0,1,2", *extra)

    # the job of seed 0 kills itself at step 2; seed 1 runs beside it; seed 2 waits for a worker
    first = launch(*fault("sigkill", 2, seed=0))
    assert first.returncode != 0 and "TerminatedWorkerError" in first.stderr
    jobs = [sweep_job(sweep, "rope", "copy", seed, f"seed={seed}") for seed in range(3)]
    statuses = {d.name: results(d)["status"] for d in jobs if (d / "results.json").exists()}
    assert statuses.get(jobs[0].name) == "running"  # killed outright: never looks finished
    before = {
        name: (sweep / name / "results.json").read_bytes()
        for name, status in statuses.items()
        if status == "completed"
    }
    # callbacks are not part of a job's identity (nor of its directory): the same jobs, none of
    # them killed this time
    second = launch(*fault("sigkill", 99999), "skip_completed=true")
    assert second.returncode == 0, second.stderr[-3000:]
    assert sorted(d.name for d in sweep.iterdir() if (d / ".hydra").is_dir()) == sorted(
        d.name for d in jobs
    )
    assert all(results(d)["status"] == "completed" for d in jobs)
    assert all(
        (sweep / name / "results.json").read_bytes() == data for name, data in before.items()
    )
