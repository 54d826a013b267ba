import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from pelab import record as results
from pelab.recorder import Planned, Recorder
from pelab.resume_commands import resume_command


def test_json_is_written_atomically_and_leaves_no_temporary_files(tmp_path):
    path = tmp_path / "run" / "results.json"
    results.write_json_atomic(path, {"status": "completed", "x": 1})
    results.write_json_atomic(path, {"status": "failed"})
    assert json.loads(path.read_text()) == {"status": "failed"}
    assert [p.name for p in path.parent.iterdir()] == ["results.json"]


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_a_record_gets_the_mode_of_any_new_file(tmp_path, umask):
    """Readable by the group and others under the usual umask (not ``mkstemp``'s 0600)."""
    old = os.umask(umask)
    try:
        path = results.write_json_atomic(tmp_path / "results.json", {"status": "completed"})
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask


def test_a_failed_write_keeps_the_previous_file(tmp_path):
    path = tmp_path / "results.json"
    results.write_json_atomic(path, {"status": "completed"})
    circular: dict = {}
    circular["self"] = circular
    with pytest.raises(ValueError, match="Circular"):
        results.write_json_atomic(path, circular)
    assert json.loads(path.read_text()) == {"status": "completed"}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_environment_records_versions_and_commit():
    env = results.environment()
    assert env["versions"]["torch"] and env["versions"]["pelab"]
    assert env["git_commit"] is None or len(env["git_commit"]) == 40


def outcome(**notes) -> SimpleNamespace:
    """A finished run's ``Outcome``, as little as a record needs."""
    task = SimpleNamespace(train_lengths=(1, 4), in_distribution=lambda n: n <= 4)
    fields = dict(scores={}, chance=None, params={"total": 1}, model_dims={}, competence=None)
    fields |= dict(
        checkpoint=None, attention=None, time_split=None, resumed_from=None, warnings=[]
    )
    return SimpleNamespace(task=task, **fields | notes)


def recorder(directory: Path, resume: str | None = None) -> Recorder:
    return Recorder("eval", [Planned(directory, {"seed": 3}, {"seed": 3}, {})], resume)


def test_a_record_is_written_on_success_and_on_failure(tmp_path):
    with recorder(tmp_path) as records:
        records.started()
        records.completed(lambda _: outcome())
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["status"] == "completed" and saved["wall_time_s"] >= 0 and "versions" in saved
    with pytest.raises(KeyError), recorder(tmp_path) as records:
        records.started()
        raise KeyError("boom")
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["status"] == "failed" and saved["error"] == "KeyError: 'boom'"


def test_a_record_says_running_from_its_start_so_a_killed_job_never_looks_finished(tmp_path):
    with recorder(tmp_path) as records:
        records.started()
        on_disk = json.loads((tmp_path / "results.json").read_text())  # what SIGKILL would leave
        assert on_disk["status"] == "running" and on_disk["config"] == {"seed": 3}
        assert on_disk["versions"]["torch"]
        records.completed(lambda _: outcome())


def test_interruptions_are_recorded_with_how_to_resume():
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    sigterm = SystemExit(143)
    sigterm.__cause__ = SIGTERMException()
    assert results.failure_reason(sigterm).startswith("interrupted by SIGTERM")
    ctrl_c = SystemExit(1)  # Lightning exits this way after a KeyboardInterrupt
    ctrl_c.__context__ = KeyboardInterrupt()
    assert results.failure_reason(ctrl_c).startswith("interrupted by Ctrl-C")
    assert "resume" in results.failure_reason(ctrl_c)
    assert results.failure_reason(ValueError("bad")) == "ValueError: bad"


def test_a_new_record_carries_the_schema_version_and_its_job_type():
    record = results.new_record("eval", {"pe": "rope", "seed": 0}, {"seed": 0})
    assert record["schema_version"] == results.SCHEMA_VERSION and record["job_type"] == "eval"
    assert record["status"] == "running"
    with pytest.raises(ValueError, match=r"unknown job type 'sweep'.*train.*eval"):
        results.new_record("sweep", {}, {})


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("job_type", ["train", "eval"])
def test_older_records_are_read_with_the_job_type_they_called_kind(tmp_path, version, job_type):
    path = tmp_path / "results.json"
    results.write_json_atomic(path, {"schema_version": version, "kind": job_type})
    assert results.read_record(path) == {"schema_version": version, "job_type": job_type}


def test_version_1_records_without_a_kind_are_read_with_their_job_type(tmp_path):
    path = tmp_path / "results.json"
    results.write_json_atomic(path, {"status": "completed", "checkpoint": "/x/best.ckpt"})
    assert results.read_record(path) == {
        "status": "completed",
        "checkpoint": "/x/best.ckpt",
        "schema_version": 1,
        "job_type": "eval",
    }
    results.write_json_atomic(path, {"status": "completed"})
    assert results.read_record(path) == {
        "status": "completed",
        "schema_version": 1,
        "job_type": "train",
    }


def test_a_new_record_reads_back_as_written(tmp_path):
    path = tmp_path / "results.json"
    record = results.new_record("train", {"seed": 0}, {"seed": 0})
    results.write_json_atomic(path, record)
    assert results.read_record(path) == record


def test_a_jobs_key_depends_on_what_it_trains_not_on_order_or_run_only_settings():
    key = results.job_key(["pe=rope", "seed=1", "model.net.d_model=32"])
    assert key == results.job_key(["model.net.d_model=32", "seed=1", "pe=rope"])
    run_only = [
        "skip_completed=true",
        "logger=csv",
        "+callbacks.fault.at_step=3",
        "threads=1",
        "data.num_workers=2",
    ]
    assert key == results.job_key(["pe=rope", "seed=1", "model.net.d_model=32", *run_only])
    assert key == results.job_key(
        ["pe=rope", "seed=1", "model.net.d_model=32", "trainer.enable_progress_bar=false"]
    )
    assert key != results.job_key(["pe=rope", "seed=2", "model.net.d_model=32"])
    assert key != results.job_key(
        ["pe=rope", "seed=1", "model.net.d_model=32", "trainer.max_steps=9"]
    )
    assert len(key) == 8 and int(key, 16) >= 0


def test_an_interruption_names_the_exact_command_that_resumes_it(tmp_path, caplog):
    command = resume_command("train", ["pe=rope", "hydra.run.dir=old"], tmp_path / "r")
    assert command == f"python scripts/train.py pe=rope hydra.run.dir={tmp_path / 'r'}"
    with pytest.raises(KeyboardInterrupt), recorder(tmp_path, command) as records:
        records.started()
        raise KeyboardInterrupt
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["error"].endswith(f"to resume: {command}")
    assert saved["status"] == results.INTERRUPTED  # not failed: it resumes
    assert command in caplog.text  # said on the console too, not only in the record


def test_a_stacks_interruption_and_its_resume_command_are_said_once(tmp_path, caplog):
    planned = [Planned(tmp_path / f"seed_{k}", {"seed": k}, {"seed": k}, {}) for k in range(3)]
    with pytest.raises(KeyboardInterrupt), Recorder("train", planned, "RESUME") as records:
        records.started()
        raise KeyboardInterrupt
    assert all(results.read_record(p.path)["error"].endswith("RESUME") for p in planned)
    assert caplog.text.count("to resume: RESUME") == 1  # not once per member


def test_every_status_a_record_ends_with_is_one_of_the_statuses():
    assert results.ended_status(KeyboardInterrupt()) == results.INTERRUPTED
    assert results.ended_status(KeyError("boom")) == results.FAILED
    assert results.STATUSES == ("running", "completed", "failed", "interrupted")


def test_a_resumed_run_records_its_total_wall_time_and_the_parts(tmp_path):
    path = tmp_path / "results.json"
    with pytest.raises(KeyboardInterrupt), recorder(tmp_path) as records:
        records.started()
        raise KeyboardInterrupt
    first = json.loads(path.read_text())["wall_time_s"]
    assert results.earlier_wall_times(path) == [first]
    with recorder(tmp_path) as records:  # the attempt that resumes it
        records.started()
        records.completed(lambda _: outcome(resumed_from="last.ckpt", resumed_from_step=6))
    saved = json.loads(path.read_text())
    assert saved["wall_time_parts_s"][0] == first and len(saved["wall_time_parts_s"]) == 2
    assert saved["wall_time_s"] == pytest.approx(sum(saved["wall_time_parts_s"]), abs=0.02)
    # a completed run run again resumes at its last step and tests again: its time carries on
    assert results.earlier_wall_times(path) == saved["wall_time_parts_s"]
    with recorder(tmp_path) as records:  # not resumed: trained anew
        records.started()
        records.completed(lambda _: outcome())
    assert "wall_time_parts_s" not in json.loads(path.read_text())
