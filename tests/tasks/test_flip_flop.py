"""Flip-flop (Liu et al. 2023): hand-written strings, the language's rules, the ignore
probability, runs."""

import pytest
import torch

from pelab.data.datamodule import TrainBatches
from pelab.data.eval_sets import build_eval_set, cache_key
from pelab.errors import ConfigError
from pelab.tasks.flip_flop import IGNORE, ONE, READ, WRITE, ZERO, FlipFlopTask
from tests.tasks.run_check import learn

TOKEN = {"w": WRITE, "i": IGNORE, "r": READ, "0": ZERO, "1": ONE}


def tokens(text: str) -> list[int]:
    return [TOKEN[c] for c in text.replace(" ", "")]


@pytest.mark.parametrize(
    ("prompt", "answer"),
    [
        ("w1 i0 r1 i1 w0 i1 r", ZERO),
        ("w1 i0 i0 i0 r", ONE),  # ignores never change the memory
        ("w0 w1 r", ONE),  # the latest write wins
        ("w1 r1 w0 r0 i1 r", ZERO),
        ("w0 r", ZERO),
    ],
)
def test_hand_written_strings(prompt, answer):
    assert FlipFlopTask.reference(tokens(prompt)) == [answer]
    assert FlipFlopTask().solve(torch.tensor([tokens(prompt)])).tolist() == [[answer]]


def test_strings_follow_the_language():
    """First w, last r, every read inside the prompt carries the latest written bit."""
    prompt, answer = FlipFlopTask().sample(500, 30, torch.Generator().manual_seed(0))
    assert prompt.shape == (500, 59)
    ops, bits = prompt[:, 0::2], prompt[:, 1::2]
    assert (ops[:, 0] == WRITE).all() and (ops[:, -1] == READ).all()
    assert ((bits == ZERO) | (bits == ONE)).all()
    for row_ops, row_bits in zip(ops.tolist(), bits.tolist(), strict=True):
        memory = None
        for op, bit in zip(row_ops, row_bits, strict=False):
            memory = bit if op == WRITE else memory
            assert op != READ or bit == memory


@pytest.mark.parametrize("p_ignore", [0.1, 0.8, 0.98])
def test_instructions_between_the_ends_follow_p_ignore(p_ignore):
    task = FlipFlopTask(p_ignore=p_ignore)
    prompt, _ = task.sample(2000, 50, torch.Generator().manual_seed(1))
    middle = prompt[:, 2:-1:2]  # instructions 2 .. n-1
    assert abs((middle == IGNORE).float().mean().item() - p_ignore) < 0.01
    assert abs((middle == WRITE).float().mean().item() - (1 - p_ignore) / 2) < 0.01


def test_bad_settings_are_refused():
    with pytest.raises(ConfigError, match=r"p_ignore must be in \[0, 1\], got 1.5"):
        FlipFlopTask(p_ignore=1.5)
    with pytest.raises(ConfigError, match="at least 2 instructions.*got length 1"):
        FlipFlopTask(train_lengths=[1, 20])


def ignore_rate(prompt: torch.Tensor) -> float:
    """The share of ``i`` among the instructions between the first and the last."""
    return (prompt[:, 2:-1:2] == IGNORE).float().mean().item()


@pytest.mark.parametrize("eval_p_ignore", [0.98, 0.1])
def test_evaluation_sets_use_eval_p_ignore_and_training_keeps_p_ignore(eval_p_ignore):
    """The paper's sparse and dense splits: validation and test sets are FFL(eval_p_ignore)."""
    task = FlipFlopTask(eval_p_ignore=eval_p_ignore, train_lengths=[50, 50], eval_lengths=[50])
    for split in ("val", "test"):
        prompt = torch.tensor(build_eval_set(task, split, 50, 2000)["prompt"])
        assert abs(ignore_rate(prompt) - eval_p_ignore) < 0.01
    train = TrainBatches(task, batch_size=2000, num_batches=1, seed=0)
    assert abs(ignore_rate(train[0][0]) - 0.8) < 0.01


def test_the_evaluation_split_is_part_of_the_cache_key():
    task = FlipFlopTask()
    assert task.spec()["eval_p_ignore"] == task.spec()["p_ignore"] == 0.8
    sparse = FlipFlopTask(eval_p_ignore=0.98)
    assert cache_key(sparse, "test", 20, 64) != cache_key(task, "test", 20, 64)


@pytest.mark.slow
def test_a_small_model_learns_flip_flop_in_distribution(tmp_path):
    lengths = ("task.train_lengths=[2,10]", "task.eval_lengths=[10]")
    record = learn(tmp_path, "flip_flop", 600, *lengths)
    assert record["metrics"]["test_id"]["exact_match"] >= 0.9
