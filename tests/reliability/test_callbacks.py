"""The run's callbacks: a short run validates and checkpoints its last step."""

from pathlib import Path

import pandas as pd
import pytest

from pelab.train import run
from tests.reliability.runs import checkpoint


@pytest.mark.parametrize(("max_steps", "validated"), [(3, [2, 3]), (3, [3]), (4, [2, 4])])
@pytest.mark.integration
def test_the_last_step_is_validated_and_saved_whatever_the_interval(
    tiny_cfg, max_steps, validated
):
    """Every ``val_check_interval`` steps and at the last one: a run shorter than the interval
    (150 steps with validation every 200) still has validation metrics, a ``best.ckpt`` to test
    and evaluate, and a ``last.ckpt`` at its last step."""
    interval = validated[0] if len(validated) > 1 else 10
    cfg = tiny_cfg(f"trainer.max_steps={max_steps}", f"trainer.val_check_interval={interval}")
    record = run(cfg)
    assert record["status"] == "completed" and record["metrics"]["val"]
    out = cfg.paths.output_dir
    assert checkpoint(f"{out}/checkpoints/last.ckpt")["global_step"] == max_steps
    assert checkpoint(f"{out}/checkpoints/best.ckpt")["global_step"] in validated
    logged = pd.read_csv(next(Path(out, "csv").glob("*/metrics.csv")))
    assert logged["val/id/exact_match"].notna().sum() == len(validated)
