"""Even pairs (Deletang et al. 2023): hand-counted pairs, the first == last property, runs."""

import pytest
import torch

from pelab.tasks.even_pairs import EVEN, ODD, A, B, EvenPairsTask
from tests.tasks.run_check import learn


def letters(text: str) -> list[int]:
    return [A if c == "a" else B for c in text]


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("aabba", EVEN),  # ab, ba: two pairs (the paper's example)
        ("aabbab", ODD),  # ab, ba, ab
        ("abab", ODD),  # ab, ba, ab
        ("a", EVEN),  # no pairs
        ("bbbb", EVEN),
        ("ba", ODD),
    ],
)
def test_hand_counted_answers(text, answer):
    prompt = letters(text)
    assert EvenPairsTask.reference(prompt) == [answer]
    assert EvenPairsTask().solve(torch.tensor([prompt])).tolist() == [[answer]]


def test_even_exactly_when_the_first_and_last_letters_agree():
    prompt, answer = EvenPairsTask().sample(512, 23, torch.Generator().manual_seed(0))
    same_ends = prompt[:, 0] == prompt[:, -1]
    assert torch.equal(answer[:, 0] == EVEN, same_ends)


def test_answers_are_balanced():
    _, answer = EvenPairsTask().sample(4000, 30, torch.Generator().manual_seed(1))
    assert abs((answer == EVEN).float().mean().item() - 0.5) < 0.03


@pytest.mark.slow
def test_a_small_model_learns_even_pairs_in_distribution(tmp_path):
    lengths = ("task.train_lengths=[1,10]", "task.eval_lengths=[10]")
    record = learn(tmp_path, "even_pairs", 600, "model=encoder", *lengths)
    assert record["metrics"]["test_id"]["exact_match"] >= 0.9
