"""A job's pieces: its trainer, callbacks and loggers, its refusals, and its records' life."""

from pathlib import Path
from types import SimpleNamespace

import pytest
from lightning.pytorch.callbacks import ProgressBar

from pelab import hydra_job, trainer
from pelab.errors import ConfigError
from pelab.record import read_record
from pelab.recorder import Planned, Recorder
from pelab.train import train
from pelab.trainer import configured_callbacks
from tests.conftest import TINY, compose_config


@pytest.mark.integration
def test_no_logger_and_no_progress_bar_train_a_complete_run(tmp_path):
    """``logger=none`` and ``trainer.enable_progress_bar=false`` (Lightning refuses a progress
    bar callback then) are a quiet run with its record and checkpoints."""
    quiet = ["logger=none", "trainer.enable_progress_bar=false"]
    cfg = compose_config([*TINY, *quiet], tmp_path)
    assert not any(isinstance(c, ProgressBar) for c in configured_callbacks(cfg))
    [record] = train(cfg)
    out = Path(cfg.paths.output_dir)
    assert record["status"] == "completed", record.get("error")
    assert (out / "checkpoints" / "best.ckpt").is_file()
    assert not (out / "csv").exists() and not (out / "wandb").exists()


def test_the_progress_bar_is_configured_by_default_on_a_terminal(tmp_path, monkeypatch):
    cfg = compose_config(TINY, tmp_path)
    monkeypatch.setattr(trainer, "interactive", lambda: True)
    assert any(isinstance(c, ProgressBar) for c in configured_callbacks(cfg))
    monkeypatch.setattr(trainer, "interactive", lambda: False)  # a pipe: no \r lines
    assert not any(isinstance(c, ProgressBar) for c in configured_callbacks(cfg))


def hydra_dir(root: Path, *files: str) -> Path:
    """A Hydra output directory as a run's start leaves it (``.hydra/``, its log), plus
    ``files``."""
    (root / ".hydra").mkdir(parents=True)
    for name in ("eval.log", *files):
        (root / name).write_text("")
    return root


def fail_with(error: Exception):
    def work(*cfg):
        raise error

    return work


def test_a_single_run_refused_for_its_config_leaves_no_directory(tmp_path, monkeypatch):
    fresh, resumed, broken = (tmp_path / name for name in ("fresh", "resumed", "broken"))
    monkeypatch.setattr(hydra_job, "in_sweep", lambda: False)
    for directory, error, files in [
        (fresh, ConfigError("bad value"), ()),  # refused: nothing ran
        (resumed, ConfigError("bad value"), ("results.json",)),  # an earlier attempt's record
        (broken, RuntimeError("a bug"), ()),  # not a refusal: its log has the traceback
    ]:
        hydra_dir(directory, *files)
        monkeypatch.setattr(hydra_job, "hydra_output_dir", lambda d=directory: d)
        with pytest.raises(type(error)):
            hydra_job.sweep_task(fail_with(error))(None)
    assert not fresh.exists()
    assert (resumed / "results.json").exists() and (broken / "eval.log").exists()


def test_a_refused_run_removes_the_empty_directories_made_for_it_up_to_the_working_directory(
    tmp_path, monkeypatch
):
    """``logs/eval/runs/<time>`` refused on a fresh clone: ``logs`` goes too; a directory that
    holds anything else (``logs/train``) stays, and so does the working directory."""
    monkeypatch.setattr(hydra_job, "in_sweep", lambda: False)
    monkeypatch.chdir(tmp_path)
    for kept in ((), ("logs/train",)):
        for name in kept:
            (tmp_path / name).mkdir(parents=True)
        directory = hydra_dir(tmp_path / "logs/eval/runs/2026-11-27_19-00-00")
        monkeypatch.setattr(hydra_job, "hydra_output_dir", lambda d=directory: d)
        with pytest.raises(ConfigError):
            hydra_job.sweep_task(fail_with(ConfigError("bad value")))(None)
        assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == sorted(
            {"logs", *kept} if kept else set()
        )
        assert tmp_path.is_dir()


def test_a_refusal_before_the_records_start_leaves_none_and_any_other_error_is_recorded(
    tmp_path, monkeypatch
):
    """Before ``started``: a single run's refusal propagates with no record; any other error, or
    a sweep job's refusal, starts the record and ends it ``failed``, and propagates."""
    monkeypatch.setattr(hydra_job, "in_sweep", lambda: False)

    def recorder(name: str) -> Recorder:
        planned = Planned(tmp_path / name, {"seed": 0}, {"seed": 0}, {"checkpoint": "c"})
        return Recorder("eval", [planned])

    with pytest.raises(ConfigError), recorder("refused"):
        raise ConfigError("bad value")
    assert not (tmp_path / "refused").exists()
    with pytest.raises(RuntimeError), recorder("bug"):
        raise RuntimeError("a bug")
    monkeypatch.setattr(hydra_job, "in_sweep", lambda: True)  # a sweep's job records its refusal
    with pytest.raises(ConfigError), recorder("swept"):
        raise ConfigError("bad value")
    for name, error in [("bug", "RuntimeError: a bug"), ("swept", "ConfigError: bad value")]:
        record = read_record(tmp_path / name / "results.json")
        assert (record["status"], record["error"], record["checkpoint"]) == ("failed", error, "c")
        assert record["job_type"] == "eval" and "wall_time_s" in record


def test_each_record_ends_with_its_own_outcome_and_the_first_error_goes_on_once_all_are_written(
    tmp_path,
):
    """``completed``: a record whose outcome raises ends ``failed`` with that error, the others
    complete, and the first error propagates after every record is written, once each."""
    planned = [Planned(tmp_path / str(k), {"seed": k}, {"seed": k}, {}) for k in range(3)]
    outcome = SimpleNamespace(
        task=SimpleNamespace(train_lengths=(1, 4), in_distribution=lambda n: n <= 4),
        scores={},
        chance=None,
        params={"total": 1},
        model_dims={},
        competence=None,
        checkpoint=None,
        attention=None,
        time_split=None,
        resumed_from=None,
        warnings=[],
    )
    asked = []

    def outcome_of(k: int):
        asked.append(k)
        if k == 1:
            raise ValueError("no scores")
        return outcome

    with pytest.raises(ValueError, match="no scores"), Recorder("eval", planned) as recorder:
        recorder.started()
        assert [read_record(p.path)["status"] for p in planned] == ["running"] * 3
        recorder.completed(outcome_of)
    assert asked == [0, 1, 2]
    with pytest.raises(RuntimeError, match="before started"):  # nothing ends unstarted
        Recorder("eval", planned).completed(outcome_of)
    records = [read_record(p.path) for p in planned]
    assert [r["status"] for r in records] == ["completed", "failed", "completed"]
    assert records[1]["error"] == "ValueError: no scores" and "metrics" not in records[1]
    assert records[0]["params"] == {"total": 1} and records[2]["train_lengths"] == [1, 4]
