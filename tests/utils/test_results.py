import json

import pytest

from pelab.utils import results
from pelab.utils.wandb_mode import wandb_mode


def test_json_is_written_atomically_and_leaves_no_temporary_files(tmp_path):
    path = tmp_path / "run" / "results.json"
    results.write_json_atomic(path, {"status": "completed", "x": 1})
    results.write_json_atomic(path, {"status": "failed"})
    assert json.loads(path.read_text()) == {"status": "failed"}
    assert [p.name for p in path.parent.iterdir()] == ["results.json"]


def test_a_failed_write_keeps_the_previous_file(tmp_path):
    path = tmp_path / "results.json"
    results.write_json_atomic(path, {"status": "completed"})
    circular: dict = {}
    circular["self"] = circular
    with pytest.raises(ValueError, match="Circular"):
        results.write_json_atomic(path, circular)
    assert json.loads(path.read_text()) == {"status": "completed"}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_per_length_regroups_flat_metric_keys():
    flat = {
        "test/exact_match/len_16": 0.5,
        "test/token_acc/len_16": 0.75,
        "test/exact_match/len_8": 1.0,
        "test/token_acc/len_8": 1.0,
        "test/id/exact_match": 0.9,
        "val/exact_match/len_8": 0.1,
    }
    assert results.per_length(flat, "test") == {
        "8": {"exact_match": 1.0, "token_acc": 1.0},
        "16": {"exact_match": 0.5, "token_acc": 0.75},
    }


def test_environment_records_versions_and_commit():
    env = results.environment()
    assert env["versions"]["torch"] and env["versions"]["pelab"]
    assert env["git_commit"] is None or len(env["git_commit"]) == 40


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    return tmp_path / "netrc"


def test_wandb_is_offline_without_credentials(clean_env):
    assert wandb_mode() == "offline"


def test_wandb_goes_online_after_login(clean_env):
    clean_env.write_text("machine api.wandb.ai\n  login user\n  password abc123\n")
    assert wandb_mode() == "online"


def test_wandb_online_with_an_api_key_and_explicit_mode_wins(clean_env, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "abc")
    assert wandb_mode() == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode() == "disabled"


def test_a_broken_netrc_means_offline_not_a_crash(clean_env):
    clean_env.write_text("machine\n")
    assert wandb_mode() == "offline"


def test_recorded_writes_the_record_on_success_and_on_failure(tmp_path):
    path = tmp_path / "results.json"
    with results.recorded(path, {"status": "running"}) as record:
        record["status"] = "completed"
    saved = json.loads(path.read_text())
    assert saved["status"] == "completed" and saved["wall_time_s"] >= 0 and "versions" in saved
    with pytest.raises(KeyError), results.recorded(path, {"status": "running"}):
        raise KeyError("boom")
    saved = json.loads(path.read_text())
    assert saved["status"] == "failed" and saved["error"] == "KeyError: 'boom'"


def test_summary_separates_per_length_and_grouped_metrics():
    summary = results.summarize(
        {"test/exact_match/len_4": 1.0, "test/id/exact_match": 1.0, "test/ood/token_acc": 0.5}
    )
    assert summary == {
        "test": {"4": {"exact_match": 1.0}},
        "test_id": {"exact_match": 1.0},
        "test_ood": {"token_acc": 0.5},
    }


def test_recorded_writes_running_on_entry_so_a_killed_job_never_looks_finished(tmp_path):
    path = tmp_path / "results.json"
    with results.recorded(path, {"status": "running", "config": {"seed": 3}}):
        on_disk = json.loads(path.read_text())  # what a SIGKILL here would leave
        assert on_disk["status"] == "running" and on_disk["config"] == {"seed": 3}
        assert on_disk["versions"]["torch"]


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
