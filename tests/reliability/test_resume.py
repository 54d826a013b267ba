"""Kill a run mid-training, resume it, and get the uninterrupted run's numbers: bitwise equal
weights after the last step and equal metrics on the CPU. The interruption lands between two
validations (checkpoints at steps 4 and 8) in a run with dropout and randomized positions, so a
resume that replayed the wrong batches or RNG draws would be caught."""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path

import pytest
import torch

from pelab.errors import ConfigError
from pelab.train import train
from tests.reliability.runs import (
    SLURM,
    SLURM_JOB,
    assert_same_as_twin,
    checkpoint,
    cli,
    config,
    fake_slurm_job,
    fault,
    killed_in_the_test,
    results,
    uninterrupted,
)

pytestmark = pytest.mark.faults  # the fault campaign: make test-faults


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run: its directory and its record."""
    return uninterrupted(tmp_path_factory.mktemp("reference"))


@pytest.mark.integration
def test_an_exception_mid_interval_resumes_from_the_last_checkpoint(tmp_path, reference, recwarn):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="injected fault at step 6"):
        train(config(tmp_path, out, *fault("raise", 6)))
    assert results(out)["status"] == "failed"
    assert checkpoint(out / "checkpoints" / "last.ckpt")["global_step"] == 4
    [record] = train(config(tmp_path, out))  # the same command again: resumes automatically
    assert record["resumed_from"] == str(out / "checkpoints" / "last.ckpt")
    assert_same_as_twin(out, record, reference)
    # its checkpoint directory holds what it resumes from: Lightning's warning is left out
    assert [w for w in recwarn if "exists and is not empty" in str(w.message)] == []


@pytest.mark.processes
@pytest.mark.parametrize(
    ("action", "status", "said"),
    [("sigterm", 128 + signal.SIGTERM, "SIGTERM"), ("sigint", 1, "Ctrl-C")],
)
@pytest.mark.integration
def test_sigterm_or_ctrl_c_saves_a_checkpoint_at_the_step_and_the_rerun_resumes_exactly(
    tmp_path, repo_root, reference, action, status, said
):
    out = tmp_path / "run"
    proc = cli(repo_root, tmp_path, out, *fault(action, 6))
    assert proc.returncode == status, proc.stderr[-2000:]  # not 0: not a success
    saved = results(out)
    assert saved["status"] == "interrupted" and said in saved["error"]
    assert saved["stop_reason"] == "interrupted"
    # the signal arrived before step 7's batch; that step finished and was saved
    assert checkpoint(out / "checkpoints" / "last.ckpt")["global_step"] == 7
    [record] = train(config(tmp_path, out, "ckpt_path=last"))
    assert record["resumed_from"] == str(out / "checkpoints" / "last.ckpt")
    assert_same_as_twin(out, record, reference)


@pytest.mark.processes
@pytest.mark.integration
def test_a_killed_run_resumes_from_its_last_validation(tmp_path, repo_root, reference):
    out = tmp_path / "run"
    proc = cli(repo_root, tmp_path, out, *fault("sigkill", 6))
    assert proc.returncode == -signal.SIGKILL
    assert results(out)["status"] == "running"  # nothing runs after SIGKILL
    assert checkpoint(out / "checkpoints" / "last.ckpt")["global_step"] == 4
    [record] = train(config(tmp_path, out))
    assert record["status"] == "completed"
    assert_same_as_twin(out, record, reference)


@pytest.mark.processes
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
    [record] = train(config(tmp_path, out))
    assert record["resumed_from"] == str(out / "checkpoints" / "last.ckpt")
    assert_same_as_twin(out, record, reference)


@pytest.mark.processes
@pytest.mark.integration
def test_a_slurm_requeue_resumes_from_the_step_of_the_signal(
    tmp_path, repo_root, reference, monkeypatch
):
    """SLURM's requeue signal during training (deferred to the step's end by
    ``RequeueAtStepEnd``): ``last.ckpt`` is saved at that step, ``scontrol requeue`` called and
    the process ends; SLURM starts the job again in the same directory, which resumes there and
    ends with the uninterrupted run's record. No ``hpc_ckpt_N.ckpt`` is written (Lightning
    would restore it before the final test: issue 42)."""
    out = tmp_path / "run"
    env, calls = fake_slurm_job(tmp_path)
    proc = cli(repo_root, tmp_path, out, *fault("sigusr1", 6), env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert calls.read_text().split() == ["requeue", SLURM_JOB]
    assert checkpoint(out / "checkpoints" / "last.ckpt")["global_step"] == 7  # the end of step 7
    assert not list(out.glob("hpc_ckpt_*.ckpt"))
    assert results(out)["status"] == "running"  # the requeued job finishes it
    for key, value in SLURM.items():
        monkeypatch.setenv(key, value)
    [record] = train(config(tmp_path, out))
    assert record["resumed_from"] == str(out / "checkpoints" / "last.ckpt")
    assert record["resumed_from_step"] == 7
    assert_same_as_twin(out, record, reference)


def stray(source, target, step: int) -> None:
    """A requeue checkpoint at ``target`` that is not the run's: ``source``'s with every weight
    negated, saved as of ``step``."""
    saved = checkpoint(source)
    saved["state_dict"] = {k: -v for k, v in saved["state_dict"].items()}
    saved["global_step"] = step
    torch.save(saved, target)


@pytest.mark.parametrize("resume", ["true", "false"])
@pytest.mark.integration
def test_a_requeue_checkpoint_left_in_the_run_directory_changes_nothing(
    tmp_path, reference, monkeypatch, resume
):
    """Issue 42: on SLURM, Lightning restores the newest ``hpc_ckpt_N.ckpt`` of the run
    directory before a ``fit`` or ``test`` called without a checkpoint. One left there (older
    than the run's ``last.ckpt``, or by a run started over with ``resume=false``) is removed
    before any trainer starts: the run resumes (or starts) as it would without it, tests its
    own best checkpoint, and its record is the uninterrupted run's."""
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="injected fault at step 6"):
        train(config(tmp_path, out, *fault("raise", 6)))  # last.ckpt at step 4
    stray(out / "checkpoints" / "last.ckpt", out / "hpc_ckpt_1.ckpt", step=3)
    for key, value in SLURM.items():
        monkeypatch.setenv(key, value)
    [record] = train(config(tmp_path, out, f"resume={resume}"))
    assert not list(out.glob("hpc_ckpt_*.ckpt"))
    assert ("resumed_from" in record) == (resume == "true")
    assert_same_as_twin(out, record, reference)


@pytest.mark.integration
def test_a_requeue_checkpoint_of_an_earlier_pelab_is_resumed_from(
    tmp_path, reference, monkeypatch
):
    """A run directory requeued by pelab before 2026-11-28 holds its newest state in
    ``hpc_ckpt_N.ckpt``: it becomes ``last.ckpt``, the run resumes from it, and ends as the
    uninterrupted run."""
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="injected fault at step 6"):
        train(config(tmp_path, out, *fault("raise", 6)))
    (out / "checkpoints" / "last.ckpt").rename(out / "hpc_ckpt_1.ckpt")
    for key, value in SLURM.items():
        monkeypatch.setenv(key, value)
    [record] = train(config(tmp_path, out))
    assert not (out / "hpc_ckpt_1.ckpt").exists()
    assert (record["resumed_from"], record["resumed_from_step"]) == (
        str(out / "checkpoints" / "last.ckpt"),
        4,
    )
    assert_same_as_twin(out, record, reference)


@pytest.mark.integration
def test_a_best_checkpoint_of_another_run_is_never_scored_as_this_ones(tmp_path):
    """A ``best.ckpt`` left in the run directory by a run with other settings (here another
    seed) is refused, naming what differs, rather than tested as this run's."""
    out = tmp_path / "run"
    train(config(tmp_path, tmp_path / "other", "seed=1"))
    (out / "checkpoints").mkdir(parents=True)
    shutil.copy(tmp_path / "other" / "checkpoints" / "best.ckpt", out / "checkpoints")
    with pytest.raises(
        ConfigError, match=r"best.ckpt comes from a run with other settings(.|\n)*seed"
    ):
        train(config(tmp_path, out, "train=false"))


@pytest.mark.integration
def test_a_run_resumed_at_its_last_step_records_its_last_validation(tmp_path):
    """Killed during its final test, a run re-run resumes at its last step: nothing is left to
    train or validate, and its record still has the last validation (saved in the checkpoint)."""
    out = tmp_path / "run"
    [first] = train(config(tmp_path, out))
    killed_in_the_test(out)
    [again] = train(config(tmp_path, out))  # what a re-run after a kill in the test does
    assert again["resumed_from"].endswith("last.ckpt")
    assert again["metrics"]["val"] == first["metrics"]["val"] and first["metrics"]["val"]
    assert again["metrics"]["test"] == first["metrics"]["test"]
    # the training's time carries on (issue 45: the record said the re-test's 3 s, not 62)
    assert again["wall_time_parts_s"][0] == first["wall_time_s"]
    assert again["wall_time_s"] == pytest.approx(sum(again["wall_time_parts_s"]), abs=0.02)


@pytest.mark.integration
def test_a_stack_resumed_at_its_last_step_records_each_members_last_validation(tmp_path):
    cfg = config(tmp_path, tmp_path / "stack", "seeds=[0,1]")
    first = train(cfg)
    for record in first:
        killed_in_the_test(Path(record["config"]["paths"]["output_dir"]))
    again = train(config(tmp_path, tmp_path / "stack", "seeds=[0,1]"))
    assert [r["metrics"]["val"] for r in again] == [r["metrics"]["val"] for r in first]
    assert all(r["metrics"]["val"] for r in again)


@pytest.mark.integration
def test_a_completed_runs_command_run_again_says_so_and_leaves_its_record(tmp_path, caplog):
    """Issue 45: re-running a finished run's command (its printed resume command) tested it
    again and rewrote its record (a 3 s wall time, a new start). Now it says the run is done
    and returns the record untouched, byte for byte; a stack's members alike."""
    out = tmp_path / "run"
    [first] = train(config(tmp_path, out))
    saved = (out / "results.json").read_bytes()
    with caplog.at_level("WARNING", logger="pelab.train"):
        [again] = train(config(tmp_path, out, "logger=none"))  # a run-only setting may change
    assert again == first and (out / "results.json").read_bytes() == saved
    assert f"{out} already completed with this config: its record is left as it was" in caplog.text
    stack = config(tmp_path, tmp_path / "stack", "seeds=[0,1]")
    members = train(stack)
    files = [Path(r["config"]["paths"]["output_dir"]) / "results.json" for r in members]
    before = [f.read_bytes() for f in files]
    assert train(config(tmp_path, tmp_path / "stack", "seeds=[0,1]")) == members
    assert [f.read_bytes() for f in files] == before


@pytest.mark.integration
def test_lightning_requeues_nothing_itself_in_a_slurm_job(tiny_cfg, monkeypatch):
    """In a SLURM job Lightning's own requeue (``SIGUSR1`` -> ``hpc_ckpt_N.ckpt``, restored
    before every later ``fit``/``test``) is off at the source; pelab's requeue writes none."""
    from lightning.pytorch.plugins.environments import SLURMEnvironment

    from pelab.trainer import make_trainer

    def environment():  # what Lightning's signal connector reads to install its requeue
        return make_trainer(cfg, [])._accelerator_connector.cluster_environment

    cfg = tiny_cfg("logger=none")
    assert not isinstance(environment(), SLURMEnvironment)
    for key, value in SLURM.items():
        monkeypatch.setenv(key, value)
    assert isinstance(environment(), SLURMEnvironment) and environment().auto_requeue is False
