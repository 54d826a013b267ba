"""SLURM's requeue signal (SIGUSR1) at any moment of a job (issue 29, item 3): the real
``scripts/train.py`` under a fake SLURM job (``SLURM_JOB_ID``) with a fake ``scontrol`` on PATH
that records its call. Before the records are written the signal requeues the job; after, it is
ignored; never does it kill the process (SLURM's ``FAILED 10:0``). Whatever the moment, the run
ends with its uninterrupted twin's record and weights once the requeued job (the same run again,
in-process here) has finished it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from pelab.train import train
from tests import zygote
from tests.reliability.runs import (
    RESUMABLE,
    SLURM,
    SLURM_JOB,
    assert_same_as_twin,
    checkpoint,
    cli,
    config,
    fake_slurm_job,
    fault,
    results,
    uninterrupted,
)

pytestmark = pytest.mark.integration  # real processes


HOOKS = "tests.reliability.signal_hooks"


@pytest.fixture
def fake_slurm(tmp_path: Path, repo_root: Path) -> tuple[dict[str, str], Path]:
    """A SLURM job's environment whose ``scontrol`` logs its calls; the hooks importable."""
    env, calls = fake_slurm_job(tmp_path)
    return {**env, "PYTHONPATH": str(repo_root)}, calls


def calls_of(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    """The uninterrupted run: its directory and its record."""
    return uninterrupted(tmp_path_factory.mktemp("twin"))


def requeued(tmp_path: Path, out: Path, monkeypatch) -> dict:
    """What the requeued job does: the same run again in its directory, under SLURM."""
    for key, value in SLURM.items():
        monkeypatch.setenv(key, value)
    [record] = train(config(tmp_path, out))
    return record


@pytest.mark.processes
def test_sigusr1_before_the_run_requeues_the_job(
    repo_root, tmp_path, fake_slurm, twin, monkeypatch
):
    env, calls = fake_slurm
    out = tmp_path / "run"
    hook = [
        f"+hydra.callbacks.sig._target_={HOOKS}.SignalAtJob",
        "+hydra.callbacks.sig.moment=start",
    ]
    done = cli(repo_root, tmp_path, out, *hook, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert calls_of(calls) == [f"requeue {SLURM_JOB}"]
    assert not (out / "results.json").exists()  # the process ended at once, before the run
    assert "this process ends now; the requeued job resumes" in (out / "train.log").read_text()
    assert_same_as_twin(out, requeued(tmp_path, out, monkeypatch), twin)


@pytest.mark.processes
def test_sigusr1_between_fit_and_test_requeues_the_job(
    repo_root, tmp_path, fake_slurm, twin, monkeypatch
):
    env, calls = fake_slurm
    out = tmp_path / "run"
    hook = [f"+callbacks.sig._target_={HOOKS}.SignalOnFitEnd"]
    done = cli(repo_root, tmp_path, out, *hook, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert calls_of(calls) == [f"requeue {SLURM_JOB}"]
    assert results(out)["status"] == "running"  # ended before the test; the requeue resumes it
    record = requeued(tmp_path, out, monkeypatch)
    assert record["resumed_from"] == str(out / "checkpoints" / "last.ckpt")
    assert_same_as_twin(out, record, twin)


@pytest.mark.processes
def test_sigusr1_during_training_checkpoints_then_requeues(
    repo_root, tmp_path, fake_slurm, twin, monkeypatch
):
    env, calls = fake_slurm
    out = tmp_path / "run"
    done = cli(repo_root, tmp_path, out, *fault("sigusr1", 2), env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert calls_of(calls) == [f"requeue {SLURM_JOB}"]
    assert checkpoint(out / "checkpoints" / "last.ckpt")["global_step"] == 3  # the step's end
    assert not list(out.glob("hpc_ckpt_*.ckpt"))  # Lightning would restore it at the test
    record = requeued(tmp_path, out, monkeypatch)
    assert record["resumed_from_step"] == 3
    assert_same_as_twin(out, record, twin)


@pytest.mark.processes
def test_sigusr1_after_the_record_is_written_is_ignored(repo_root, tmp_path, fake_slurm, twin):
    env, calls = fake_slurm
    out = tmp_path / "run"
    marker = tmp_path / "sent"
    hook = [
        f"+hydra.callbacks.sig._target_={HOOKS}.SignalAtJob",
        "+hydra.callbacks.sig.moment=end",
        f"+hydra.callbacks.sig.marker={marker}",
    ]
    done = cli(repo_root, tmp_path, out, *hook, env=env)
    assert marker.exists()  # the signal was sent
    assert done.returncode == 0, done.stderr[-3000:]
    assert calls_of(calls) == []
    assert_same_as_twin(out, results(out), twin)
    assert (
        "SIGUSR1 after the run's records were written: ignored" in (out / "train.log").read_text()
    )


@pytest.mark.processes
def test_sigusr1_in_the_first_second_of_the_process_requeues(
    repo_root, tmp_path, fake_slurm, twin, monkeypatch
):
    """While Python still imports torch and Hydra (the job's start-up)."""
    env, calls = fake_slurm
    process = cli(repo_root, tmp_path, tmp_path / "run", wait=False, env=env, fresh=True)
    time.sleep(1.0)
    process.send_signal(signal.SIGUSR1)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr[-3000:]
    assert calls_of(calls) == [f"requeue {SLURM_JOB}"]
    assert not (tmp_path / "run" / "results.json").exists()  # ended at once after the requeue
    out = tmp_path / "run"
    assert_same_as_twin(out, requeued(tmp_path, out, monkeypatch), twin)


@pytest.mark.processes
def test_off_slurm_the_signal_keeps_its_default_action(repo_root, tmp_path, fake_slurm):
    """Control: without SLURM_JOB_ID nothing handles SIGUSR1, and the same moment kills the run
    (what happened on the cluster before; it shows the hook does send the signal)."""
    env, calls = fake_slurm
    env = {k: v for k, v in env.items() if k not in SLURM}
    hook = [
        f"+hydra.callbacks.sig._target_={HOOKS}.SignalAtJob",
        "+hydra.callbacks.sig.moment=start",
    ]
    cmd = ["scripts/train.py", *RESUMABLE, *hook, f"hydra.run.dir={tmp_path / 'r'}"]
    env = {**os.environ, "WANDB_MODE": "offline", **env}
    done = zygote.run(cmd, cwd=repo_root, env=env, timeout=300)
    assert done.returncode == -signal.SIGUSR1
    assert calls_of(calls) == []
