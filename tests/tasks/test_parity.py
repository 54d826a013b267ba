"""Parity (Deletang et al. 2023): hand-computed answers, properties, both layouts end to end."""

import pytest
import torch

from pelab.data.datamodule import TrainBatches
from pelab.data.eval_sets import build_eval_set
from pelab.errors import ConfigError
from pelab.tasks.parity import EVEN, ODD, ONE, ZERO, ParityTask
from tests.tasks.run_check import KINDS, assert_runs, learn


def bits(text: str) -> list[int]:
    return [ONE if c == "1" else ZERO for c in text]


@pytest.mark.parametrize(
    ("text", "answer"),
    [("1011", ODD), ("011", EVEN), ("0", EVEN), ("1", ODD), ("0000", EVEN), ("111111", EVEN)],
)
def test_hand_computed_answers(text, answer):
    prompt = bits(text)
    assert ParityTask.reference(prompt) == [answer]
    assert ParityTask().solve(torch.tensor([prompt])).tolist() == [[answer]]


def test_flipping_one_bit_flips_the_answer():
    task = ParityTask()
    prompt, answer = task.sample(256, 17, torch.Generator().manual_seed(0))
    flipped = prompt.clone()
    flipped[:, 5] = ZERO + ONE - flipped[:, 5]
    assert torch.equal(task.solve(flipped), EVEN + ODD - answer)


def test_answers_are_balanced():
    _, answer = ParityTask().sample(4000, 30, torch.Generator().manual_seed(1))
    assert abs((answer == EVEN).float().mean().item() - 0.5) < 0.03


def test_a_fixed_alphabet_refuses_num_symbols():
    assert ParityTask().vocab_size == 3 + 4
    with pytest.raises(ConfigError, match="fixed alphabet of 4 symbols"):
        ParityTask(num_symbols=8)


def test_evaluation_prompts_never_occur_in_training():
    """At 40 bits the space (2^40 prompts) is large: the test set and 10k training prompts are
    disjoint. Short lengths repeat by necessity (there are only 2^n prompts of n bits)."""
    task = ParityTask(train_lengths=[40, 40], eval_lengths=[40])
    test = {tuple(p) for p in build_eval_set(task, "test", 40, 512)["prompt"]}
    train = TrainBatches(task, batch_size=256, num_batches=40, seed=0)
    assert not test & {tuple(p) for i in range(len(train)) for p in train[i][0].tolist()}


@pytest.mark.parametrize("model", KINDS)
def test_trains_and_tests_in_both_layouts(tiny_cfg, model):
    assert_runs(tiny_cfg, model, "parity", "task.eval_lengths=[4,8]")


@pytest.mark.slow
def test_a_small_model_learns_parity_in_distribution(tmp_path):
    lengths = ("task.train_lengths=[1,6]", "task.eval_lengths=[6]")
    record = learn(tmp_path, "parity", 1000, "model=encoder", *lengths)
    assert record["metrics"]["test_id"]["exact_match"] >= 0.9
