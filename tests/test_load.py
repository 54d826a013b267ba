"""``pelab.load_run``: a trained run in Python, its model the one that was tested."""

import pytest
import torch

import pelab
from pelab.errors import ConfigError
from pelab.train import train
from tests.conftest import TINY, compose_config


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("load")
    short = ["task.train_lengths=[1,3]", "task.eval_lengths=[2,3,5]", "task.n_test=64"]
    steps = ["trainer.max_steps=150", "trainer.val_check_interval=50", "data.batch_size=32"]
    small = [o for o in TINY if not o.startswith(("model.", "trainer.", "task.n_test"))]
    cfg = compose_config([*small, "logger=csv", *steps, *short], tmp)  # the default model
    [record] = train(cfg)
    return cfg, record


@pytest.mark.integration
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
        assert all(0.0 <= v <= 1.0 for v in values.values())  # fractions, as documented
    prompt, answer = loaded.task.sample(3, 4, torch.Generator().manual_seed(0))
    assert loaded.predict(prompt).shape == answer.shape


@pytest.mark.integration
def test_the_weights_are_the_checkpoints(trained):
    cfg, _ = trained
    best, last = pelab.load_run(cfg.paths.output_dir), pelab.load_run(cfg.paths.output_dir, "last")
    saved = torch.load(last.checkpoint, weights_only=True)["state_dict"]
    assert all(torch.equal(saved[k], v) for k, v in last.model.state_dict().items())
    assert best.checkpoint != last.checkpoint


@pytest.mark.integration
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


@pytest.mark.integration
def test_predict_takes_and_returns_text_for_a_built_in_task(trained):
    cfg, _ = trained
    loaded = pelab.load_run(cfg.paths.output_dir)
    names = loaded.symbols()
    assert names[:3] == ["a", "b", "c"] and len(names) == loaded.task.num_symbols
    prompt, answer = loaded.task.sample(1, 3, torch.Generator().manual_seed(0))
    text = loaded.decode(prompt[0])
    assert len(text.split()) == 3 and torch.equal(loaded.encode(text), prompt[0])
    said = loaded.predict(text)
    assert isinstance(said, str) and said == loaded.decode(loaded.predict(prompt)[0])
    assert loaded.predict([text, text]) == [said, said]


@pytest.mark.parametrize(
    ("prompt", "match"),
    [
        ([5, 3, 4], r"a prompt is text .*or a tensor of token ids"),
        ("c a zz", r"'zz' is not a symbol of the copy task; its symbols: a, b, c"),
        (torch.tensor([[0, 3, 4, 1]]), r"token 0 \(BOS\).* predict adds BOS and SEP itself"),
        (torch.tensor([[3, 4, 99]]), r"token 99 .*valid token ids: 3\.\.34"),
        (torch.zeros(1, 2, 3, dtype=torch.long), r"\[batch, length\].* got shape \[1, 2, 3\]"),
    ],
)
@pytest.mark.integration
def test_a_bad_prompt_is_a_clear_error(trained, prompt, match):
    loaded = pelab.load_run(trained[0].paths.output_dir)
    with pytest.raises(ValueError, match=match):
        loaded.predict(prompt)


@pytest.mark.integration
def test_a_run_prints_in_one_line_without_its_config(trained):
    loaded = pelab.load_run(trained[0].paths.output_dir)
    text = repr(loaded)
    assert "\n" not in text and "_target_" not in text
    assert "copy" in text and "best.ckpt" in text


def test_the_directory_of_a_stack_points_to_its_members(tmp_path):
    for member in ("seed_0", "seed_1"):
        (tmp_path / member).mkdir()
        (tmp_path / member / "results.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"stack of members.*seed_0.*seed_1"):
        pelab.load_run(tmp_path)
