"""Kill a run mid-training, resume it, and get the uninterrupted run's numbers: bitwise equal
weights after the last step and equal metrics on the CPU. The interruption lands between two
validations (checkpoints at steps 4 and 8) in a run with dropout and randomized positions, so a
resume that replayed the wrong batches or RNG draws would be caught."""

from __future__ import annotations

import os
import signal
import time

import pytest

from pelab.train import run
from tests.reliability.runs import checkpoint, cli, config, fault, results, same_weights

pytestmark = pytest.mark.faults  # the fault campaign: make test-faults


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run: its directory and its record."""
    tmp = tmp_path_factory.mktemp("reference")
    record = run(config(tmp, tmp / "run"))
    return tmp / "run", record


def assert_same_as_reference(output_dir, record, reference) -> None:
    ref_dir, ref_record = reference
    assert checkpoint(output_dir / "checkpoints" / "last.ckpt")["global_step"] == 8
    assert same_weights(
        output_dir / "checkpoints" / "last.ckpt", ref_dir / "checkpoints/last.ckpt"
    )
    assert record["metrics"] == ref_record["metrics"]


@pytest.mark.integration
def test_an_exception_mid_interval_resumes_from_the_last_checkpoint(tmp_path, reference):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="injected fault at step 6"):
        run(config(tmp_path, out, *fault("raise", 6)))
    assert results(out)["status"] == "failed"
    assert checkpoint(out / "checkpoints" / "last.ckpt")["global_step"] == 4
    record = run(config(tmp_path, out))  # the same command again: resumes automatically
    assert record["resumed_from"] == str(out / "checkpoints" / "last.ckpt")
    assert_same_as_reference(out, record, reference)


@pytest.mark.integration
def test_sigterm_saves_a_checkpoint_at_the_step_and_the_rerun_resumes_exactly(
    tmp_path, repo_root, reference
):
    out = tmp_path / "run"
    proc = cli(repo_root, tmp_path, out, *fault("sigterm", 6))
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr[-2000:]  # not 0: not a success
    saved = results(out)
    assert saved["status"] == "interrupted" and "SIGTERM" in saved["error"]
    assert saved["stop_reason"] == "interrupted"
    # SIGTERM arrived before step 7's batch; that step finished and was saved
    assert checkpoint(out / "checkpoints" / "last.ckpt")["global_step"] == 7
    record = run(config(tmp_path, out, "ckpt_path=last"))
    assert record["resumed_from"] == str(out / "checkpoints" / "last.ckpt")
    assert_same_as_reference(out, record, reference)


@pytest.mark.parametrize("action", ["sigkill", "sigint"])
@pytest.mark.integration
def test_a_killed_run_resumes_from_its_last_validation(tmp_path, repo_root, reference, action):
    out = tmp_path / "run"
    proc = cli(repo_root, tmp_path, out, *fault(action, 6))
    if action == "sigkill":  # nothing runs after SIGKILL: the record still says running
        assert proc.returncode == -signal.SIGKILL
        assert results(out)["status"] == "running"
    else:  # Ctrl-C: Lightning stops the run, which records why
        assert proc.returncode != 0
        assert "Ctrl-C" in results(out)["error"]
    assert checkpoint(out / "checkpoints" / "last.ckpt")["global_step"] == 4
    record = run(config(tmp_path, out))
    assert record["status"] == "completed"
    assert_same_as_reference(out, record, reference)


@pytest.mark.integration
def test_sigterm_during_the_final_test_stops_at_once_and_the_rerun_only_tests_again(
    tmp_path, repo_root, reference
):
    """Lightning only notes SIGTERM outside training steps; a long test would run on. The run
    stops at once (status 143, recorded), and the same command resumes at its last step, tests
    again and ends as the uninterrupted run."""
    out, testing = tmp_path / "run", tmp_path / "testing"
    proc = cli(repo_root, tmp_path, out, *fault("pause", 0, testing, during="test"), wait=False)
    try:
        deadline = time.monotonic() + 240
        while not testing.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-2000:]
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
    assert "interrupted by SIGTERM" in results(out)["error"]
    record = run(config(tmp_path, out))
    assert record["resumed_from"] == str(out / "checkpoints" / "last.ckpt")
    assert_same_as_reference(out, record, reference)


@pytest.mark.integration
def test_a_slurm_requeue_checkpoint_is_resumed(tmp_path, repo_root, reference, monkeypatch):
    """Lightning's SLURM auto-requeue (deferred to the step's end by ``RequeueAtStepEnd``): on
    SIGUSR1 it saves ``hpc_ckpt_1.ckpt`` in the run directory and calls ``scontrol requeue``;
    SLURM then kills the job and starts it again in the same directory (with the submitit
    launcher: the same job with the same overrides), which resumes exactly."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "scontrol.log"}\n')
    (bin_dir / "scontrol").chmod(0o755)
    slurm = {"SLURM_NTASKS": "1", "SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "pelab"}
    env = {**slurm, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    out, paused = tmp_path / "run", tmp_path / "paused"
    faults = [*fault("sigusr1", 6), *fault("pause", 7, paused, name="then_wait")]
    proc = cli(repo_root, tmp_path, out, *faults, wait=False, env=env)
    try:
        deadline = time.monotonic() + 240
        while not paused.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-2000:]
            time.sleep(0.1)
    finally:
        proc.kill()  # what SLURM does to a requeued job
        proc.wait()
    assert (tmp_path / "scontrol.log").read_text().split() == ["requeue", "4242"]
    assert checkpoint(out / "hpc_ckpt_1.ckpt")["global_step"] == 7  # the end of step 7
    for key, value in slurm.items():
        monkeypatch.setenv(key, value)
    record = run(config(tmp_path, out))
    assert record["resumed_from"] == str(out / "hpc_ckpt_1.ckpt")
    assert_same_as_reference(out, record, reference)


@pytest.mark.integration
def test_a_run_resumed_at_its_last_step_records_its_last_validation(tmp_path):
    """Killed during its final test, a run re-run resumes at its last step: nothing is left to
    train or validate, and its record still has the last validation (saved in the checkpoint)."""
    out = tmp_path / "run"
    first = run(config(tmp_path, out))
    again = run(config(tmp_path, out))  # what a re-run after a kill in the test does
    assert again["resumed_from"].endswith("last.ckpt")
    assert again["metrics"]["val"] == first["metrics"]["val"] and first["metrics"]["val"]
    assert again["metrics"]["test"] == first["metrics"]["test"]


@pytest.mark.integration
def test_a_stack_resumed_at_its_last_step_records_each_members_last_validation(tmp_path):
    cfg = config(tmp_path, tmp_path / "stack", "seeds=[0,1]")
    first = run(cfg)
    again = run(config(tmp_path, tmp_path / "stack", "seeds=[0,1]"))
    assert [r["metrics"]["val"] for r in again] == [r["metrics"]["val"] for r in first]
    assert all(r["metrics"]["val"] for r in again)
