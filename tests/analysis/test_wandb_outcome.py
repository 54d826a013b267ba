"""A job's W&B run ends with its outcome, so that tables built from W&B show failures."""

import lightning as L
import pytest
import wandb

from pelab.train import train


@pytest.fixture
def finished(monkeypatch):
    """What each ``wandb.finish`` saw: the exit code and the run's summary keys of the outcome."""
    seen = []
    real_finish = wandb.finish

    def finish(exit_code=None, **kwargs):
        summary = wandb.run.summary
        seen.append(
            {"exit_code": exit_code, "status": summary["status"], "error": summary["error"]}
        )
        chance.append({k: summary[k] for k in summary.keys() if k.startswith("chance")})
        real_finish(exit_code=exit_code, **kwargs)

    chance: list[dict[str, float]] = []  # the chance levels in each finished run's summary
    monkeypatch.setattr(wandb, "finish", finish)
    return seen, chance


@pytest.mark.integration
def test_a_run_that_fails_after_wandb_started_is_marked_failed(tiny_cfg, monkeypatch, finished):
    finished, _ = finished

    def broken_fit(*args, **kwargs):
        raise RuntimeError("boom in training")

    monkeypatch.setattr(L.Trainer, "fit", broken_fit)
    with pytest.raises(RuntimeError, match="boom"):
        train(tiny_cfg("logger=wandb"))
    assert finished == [
        {"exit_code": 1, "status": "failed", "error": "RuntimeError: boom in training"}
    ]


@pytest.mark.integration
def test_a_completed_run_ends_with_exit_code_0_and_its_chance_levels(tiny_cfg, finished):
    finished, chance = finished
    [record] = train(
        tiny_cfg("logger=wandb", "trainer.max_steps=1", "trainer.val_check_interval=1")
    )
    assert finished == [{"exit_code": 0, "status": "completed", "error": ""}]
    # the chance levels of the ID and OOD means, beside the metrics in W&B and results.json
    levels = {
        f"{split}/{metric}": value
        for split in ("chance_id", "chance_ood")
        for metric, value in record["metrics"][split].items()
    }
    assert chance == [levels] and len(levels) == 4
