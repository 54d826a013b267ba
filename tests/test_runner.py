"""The shared pieces of a job: its trainer, callbacks and loggers."""

from pathlib import Path

import pytest
from lightning.pytorch.callbacks import ProgressBar

from pelab import hydra_job, trainer
from pelab.errors import ConfigError
from pelab.train import run
from pelab.trainer import configured_callbacks
from tests.conftest import TINY, compose_config


@pytest.mark.integration
def test_no_logger_and_no_progress_bar_train_a_complete_run(tmp_path):
    """``logger=none`` and ``trainer.enable_progress_bar=false`` (Lightning refuses a progress
    bar callback then) are a quiet run with its record and checkpoints."""
    quiet = ["logger=none", "trainer.enable_progress_bar=false"]
    cfg = compose_config([*TINY, *quiet], tmp_path)
    assert not any(isinstance(c, ProgressBar) for c in configured_callbacks(cfg))
    record = run(cfg)
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


def test_a_refusal_propagates_from_the_checks_and_any_other_error_is_kept_for_the_record(
    monkeypatch,
):
    monkeypatch.setattr(hydra_job, "in_sweep", lambda: False)
    with pytest.raises(ConfigError):
        hydra_job.checked(fail_with(ConfigError("bad value")))
    bug = RuntimeError("a bug")
    assert hydra_job.checked(fail_with(bug)) is bug and hydra_job.checked(lambda: 3) == 3
    monkeypatch.setattr(hydra_job, "in_sweep", lambda: True)  # a sweep's job records its refusal
    assert isinstance(hydra_job.checked(fail_with(ConfigError("bad value"))), ConfigError)
