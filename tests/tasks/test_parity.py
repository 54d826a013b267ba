"""Parity (Deletang et al. 2023): hand-computed answers, properties, runs."""

import pytest
import torch

from pelab.errors import ConfigError
from pelab.tasks.parity import EVEN, ODD, ONE, ZERO, ParityTask
from tests.tasks.run_check import learn


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


@pytest.mark.slow
def test_a_small_model_learns_parity_in_distribution(tmp_path):
    lengths = ("task.train_lengths=[1,6]", "task.eval_lengths=[6]")
    record = learn(tmp_path, "parity", 1000, "model=encoder", *lengths)
    assert record["metrics"]["test_id"]["exact_match"] >= 0.9
