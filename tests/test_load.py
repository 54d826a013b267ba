"""``pelab.load_run``: a trained run in Python, its model the one that was tested."""

import pytest
import torch

import pelab
from pelab.errors import ConfigError
from pelab.train import run
from tests.conftest import TINY, compose_config


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("load")
    short = ["task.train_lengths=[1,3]", "task.eval_lengths=[2,3,5]", "task.n_test=64"]
    steps = ["trainer.max_steps=150", "trainer.val_check_interval=50", "data.batch_size=32"]
    small = [o for o in TINY if not o.startswith(("model.", "trainer.", "task.n_test"))]
    cfg = compose_config([*small, "logger=csv", *steps, *short], tmp)  # the default model
    return cfg, run(cfg)


def test_a_loaded_run_scores_what_its_test_scored(trained):
    cfg, record = trained
    loaded = pelab.load_run(cfg.paths.output_dir)
    assert loaded.record == record and loaded.config.pe._target_ == cfg.pe._target_
    assert not loaded.model.training and loaded.checkpoint.name == "best.ckpt"
    test = record["metrics"]["test"]
    scores = loaded.scores()
    assert list(scores) == [2, 3, 5] and any(v["exact_match"] > 0 for v in scores.values())
    for length, values in scores.items():
        assert values == pytest.approx(test[str(length)], abs=1e-6)
    prompt, answer = loaded.task.sample(3, 4, torch.Generator().manual_seed(0))
    assert loaded.predict(prompt).shape == answer.shape


def test_the_weights_are_the_checkpoints(trained):
    cfg, _ = trained
    best, last = pelab.load_run(cfg.paths.output_dir), pelab.load_run(cfg.paths.output_dir, "last")
    saved = torch.load(last.checkpoint, weights_only=True)["state_dict"]
    assert all(torch.equal(saved[k], v) for k, v in last.model.state_dict().items())
    assert best.checkpoint != last.checkpoint


def test_loading_chooses_torchs_threads_by_the_model_unless_told(trained):
    cfg, _ = trained
    torch.set_num_threads(2)
    pelab.load_run(cfg.paths.output_dir)
    assert torch.get_num_threads() == 1  # the default model is small (pelab.threads)
    pelab.load_run(cfg.paths.output_dir, threads=2)
    assert torch.get_num_threads() == 2
    torch.set_num_threads(3)
    pelab.load_run(cfg.paths.output_dir, threads=None)  # left as they are
    assert torch.get_num_threads() == 3


def test_a_directory_without_a_run_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match=r"ckpt_path=.*best.ckpt does not exist"):
        pelab.load_run(tmp_path)
