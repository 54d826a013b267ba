"""Whole runs in-process: results.json, W&B offline, checkpoints (bad settings, determinism and
resume: ``tests/reliability/``)."""

import json
from pathlib import Path

import pandas as pd
import pytest

from pelab.train import train
from pelab.wandb_finish import PER_LENGTH_COLUMNS, W_AND_B_RECORD, per_length_rows


def read_results(cfg) -> dict:
    return json.loads((Path(cfg.paths.output_dir) / "results.json").read_text())


@pytest.mark.integration
def test_a_tiny_run_writes_complete_results(tiny_cfg):
    cfg = tiny_cfg("pe=alibi", "task=reverse", "seed=5")
    train(cfg)
    res = read_results(cfg)
    assert res["status"] == "completed"
    assert res["choices"] == {
        "model": "decoder",
        "pe": "alibi",
        "task": "reverse",
        "positions": "contiguous",
        "trainer": "default",
        "experiment": None,
        "seed": 5,
    }
    assert res["config"]["model"]["net"]["d_model"] == 16
    lengths = [str(n) for n in cfg.task.eval_lengths]
    assert list(res["metrics"]["test"]) == lengths
    for m in res["metrics"]["test"].values():
        assert 0.0 <= m["exact_match"] <= m["token_acc"] <= 1.0
    assert set(res["metrics"]["test_id"]) == {"exact_match", "token_acc"}
    assert set(res["metrics"]["test_ood"]) == {"exact_match", "token_acc"}
    assert res["params"]["pe"] == 0 and res["params"]["total"] > 0
    assert res["wall_time_s"] > 0 and res["versions"]["torch"]
    checkpoints = Path(cfg.paths.output_dir, "checkpoints")
    assert (checkpoints / "last.ckpt").exists() and (checkpoints / "best.ckpt").exists()
    # where its time went: 4 steps, a validation every 2 (no sanity check counted), a test
    split = res["time_split_s"]
    assert (split["steps"], split["validations"]) == (4, 2) and set(split) == {
        "startup", "training", "steps", "validation", "validations", "test"
    }  # fmt: skip
    phases = [split[k] for k in ("startup", "training", "validation", "test")]
    assert all(t > 0 for t in phases) and sum(phases) <= res["wall_time_s"]
    # validation reads one teacher-forced pass: exact match and next-token accuracy
    assert set(res["metrics"]["val"]["8"]) == {"exact_match", "next_token_acc"}


@pytest.mark.integration
def test_wandb_logs_offline_into_the_run_directory(tiny_cfg):
    cfg = tiny_cfg("logger=wandb", "pe=t5_bias")
    train(cfg)
    runs = list(Path(cfg.paths.output_dir, "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and any(runs[0].glob("*.wandb"))
    record = read_results(cfg)
    assert record["params"]["pe"] == 32 * cfg.model.net.n_heads
    # saved with the run: its record, and its test per length as a W&B table
    files = runs[0] / "files"
    assert json.loads((files / W_AND_B_RECORD).read_text()) == record
    assert not list(files.rglob("results.json"))  # which make_table.py would take for a run
    [table] = (files / "media" / "table" / "test").glob("per_length_*.table.json")
    logged = json.loads(table.read_text())
    assert logged["columns"] == list(PER_LENGTH_COLUMNS)
    assert logged["data"] == per_length_rows(record)


@pytest.mark.integration
def test_a_stack_says_its_wandb_mode_once(tiny_cfg, caplog):
    with caplog.at_level("INFO", logger="pelab.trainer"):
        train(tiny_cfg("logger=wandb", "seeds=[0,1]"))
    assert caplog.text.count("W&B: offline mode") == 1  # not once per member


@pytest.mark.integration
def test_the_learning_rate_of_every_step_is_logged(tiny_cfg):
    cfg = tiny_cfg("trainer.log_every_n_steps=1")
    train(cfg)
    [csv] = Path(cfg.paths.output_dir, "csv").glob("*/metrics.csv")
    lr = pd.read_csv(csv).dropna(subset=["lr-AdamW"])["lr-AdamW"]
    assert len(lr) == cfg.trainer.max_steps and lr.is_monotonic_increasing  # in the warm-up
    assert 0 < lr.iloc[-1] < cfg.model.optimizer.lr


@pytest.mark.integration
def test_the_loss_is_logged_at_every_logging_step_and_at_a_stop_off_it(tiny_cfg):
    """Steps 0-4, logging every 2nd: steps 1 and 3, and step 4, where ``ValidateLastStep``
    stops the trainer off the validation interval, each with its own step's loss (not the one
    logged before, repeated)."""
    cfg = tiny_cfg("trainer.max_steps=5", "trainer.log_every_n_steps=2")
    train(cfg)
    [csv] = Path(cfg.paths.output_dir, "csv").glob("*/metrics.csv")
    losses = pd.read_csv(csv).dropna(subset=["train/loss"])
    assert losses["step"].tolist() == [1, 3, 4]
    assert losses["train/loss"].nunique() == 3


@pytest.mark.integration
def test_encoder_runs_end_to_end(tiny_cfg):
    cfg = tiny_cfg("model=encoder", "pe=sinusoidal")
    train(cfg)
    res = read_results(cfg)
    assert res["status"] == "completed" and res["choices"]["model"] == "encoder"


@pytest.mark.parametrize(
    "devices, accelerator, one",
    [
        (1, "gpu", True),
        ([1], "gpu", True),
        ("1,", "gpu", True),
        ("auto", "cpu", True),
        (2, "gpu", False),
        ([0, 1], "gpu", False),
        (-1, "gpu", False),
        ("auto", "gpu", False),  # Lightning would take every GPU of the node, with DDP
    ],
)
def test_a_job_on_more_than_one_device_is_refused_saying_pelab_scales_by_jobs(
    devices, accelerator, one
):
    from omegaconf import OmegaConf

    from pelab.assembly import check_devices
    from pelab.errors import ConfigError

    trainer = OmegaConf.create({"devices": devices, "accelerator": accelerator})
    if one:
        check_devices(trainer)
    else:
        with pytest.raises(ConfigError, match=r"trainer.devices=.*scales by jobs, not DDP"):
            check_devices(trainer)


def test_trainer_gpu_on_a_machine_without_one_is_refused_before_any_work(monkeypatch):
    """Issue 45: one line, before a run directory, a W&B run or a record exist (Lightning's
    own error came after all three); checked where the job runs, so a cluster's login node
    still launches GPU jobs."""
    import torch
    from omegaconf import OmegaConf

    from pelab.assembly import check_gpu_present
    from pelab.errors import ConfigError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(
        ConfigError, match=r"trainer.accelerator=gpu .* no CUDA GPU .*trainer=default"
    ):
        check_gpu_present(OmegaConf.create({"accelerator": "gpu"}))
    check_gpu_present(OmegaConf.create({"accelerator": "cpu"}))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    check_gpu_present(OmegaConf.create({"accelerator": "gpu"}))


def test_a_protocol_with_nothing_beyond_training_says_so_before_it_trains():
    """Issue 45: ``task.train_lengths=[1,80]`` (a typo for ``[1,8]``) left every evaluation
    length in distribution, and an extrapolation tool said nothing for 9 minutes. The note is
    logged before training and kept in the record's ``warnings``."""
    from pelab.lengths import no_extrapolation_note

    note = no_extrapolation_note([1, 80], [4, 8, 16, 32])
    assert note.startswith("no evaluation length lies beyond training")
    assert "task.train_lengths=[1, 80]" in note and "task.eval_lengths=[4, 8, 16, 32]" in note
    assert no_extrapolation_note([1, 8], [4, 8, 16]) is None
