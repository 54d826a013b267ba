"""The same config and seed give the same numbers on the CPU: bitwise equal weights and equal
``results.json`` metrics across two runs, with the seed covering data, initialisation, dropout
and randomized positions; the fused and eager attention kernels score a trained model alike;
results record the library versions and the git commit."""

from __future__ import annotations

import subprocess
from pathlib import Path

import lightning as L
import pytest
import torch

from pelab.assembly import build_model, build_task
from pelab.data.datamodule import TaskData
from pelab.train import train
from tests.conftest import TINY, compose_config
from tests.reliability.runs import checkpoint, same_weights

# dropout draws from the seeded RNG, randomized positions from (seed, step); short evaluation
# keeps runs fast
RANDOM_PARTS = [
    "model.net.dropout=0.1",
    "positions=randomized",
    "positions.max_position=64",
    "task.train_lengths=[1,8]",
    "task.eval_lengths=[8,12]",
]


def tiny_run(tmp_path: Path, name: str, *overrides: str) -> tuple[Path, dict]:
    cfg = compose_config([*TINY, "logger=csv", *RANDOM_PARTS, *overrides], tmp_path)
    cfg.paths.output_dir = str(tmp_path / name)
    [record] = train(cfg)
    return tmp_path / name, record


@pytest.mark.integration
def test_the_same_seed_gives_identical_weights_and_metrics_and_another_seed_does_not(tmp_path):
    first_dir, first = tiny_run(tmp_path, "first", "seed=1")
    second_dir, second = tiny_run(tmp_path, "second", "seed=1")
    other_dir, _ = tiny_run(tmp_path, "other", "seed=2")
    last = Path("checkpoints", "last.ckpt")
    assert same_weights(first_dir / last, second_dir / last)
    assert first["metrics"] == second["metrics"]
    assert not same_weights(first_dir / last, other_dir / last)


@pytest.mark.integration
def test_results_record_library_versions_and_the_git_commit(tmp_path, repo_root):
    _, record = tiny_run(tmp_path, "run", "train=false", "test=false")
    assert record["versions"]["torch"] == torch.__version__
    assert record["versions"]["lightning"] == L.__version__
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo_root, capture_output=True, text=True
    ).stdout.strip()
    assert record["git_commit"] == head and isinstance(record["git_dirty"], bool)


@pytest.mark.parametrize("pe", ["rope", "alibi"])
@pytest.mark.integration
def test_fused_and_eager_attention_score_the_same_trained_model_alike(tmp_path, pe):
    """Two code paths that compute the same function: the model trained with the eager kernel is
    tested again with PyTorch's fused kernel (for ALiBi the bias becomes the attention mask)."""
    out, record = tiny_run(tmp_path, "eager", f"pe={pe}", "model.net.attn_impl=eager")
    cfg = compose_config([*TINY, *RANDOM_PARTS, f"pe={pe}", "model.net.attn_impl=fused"], tmp_path)
    task = build_task(cfg)
    model = build_model(cfg, task)
    model.load_state_dict(checkpoint(out / "checkpoints" / "best.ckpt")["state_dict"])
    data = TaskData(task, 8, 1, cfg.seed, 8, cfg.paths.cache_dir)
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    trainer.test(model, datamodule=data, verbose=False)
    fused = model.members[0].scores["test"]
    eager = record["metrics"]["test"]
    assert {str(length) for length in fused} == set(eager)
    for length, scores in fused.items():
        for metric, value in scores.items():
            assert value == pytest.approx(eager[str(length)][metric], abs=1e-6), (length, metric)
