"""Counting: hand-counted answers in fixed-width decimal, the count's distribution, length
limits, runs."""

import pytest
import torch

from pelab.errors import ConfigError
from pelab.tasks.counting import DIGIT_0, LETTER_0, CountingTask
from tests.tasks.run_check import learn

a, b, c = LETTER_0, LETTER_0 + 1, LETTER_0 + 2


def digits(text: str) -> list[int]:
    return [DIGIT_0 + int(d) for d in text]


@pytest.mark.parametrize(
    ("count_digits", "prompt", "answer"),
    [
        (2, [a, c, a, b, a, a], "03"),  # three a before the query a
        (2, [b, b, c], "00"),  # the query c does not occur
        (1, [c, c], "1"),
        (3, [b] * 12 + [b], "012"),
    ],
)
def test_hand_counted_answers(count_digits, prompt, answer):
    task = CountingTask(count_digits=count_digits, train_lengths=[1, 9], eval_lengths=[9])
    assert task.reference(prompt) == digits(answer)
    assert task.solve(torch.tensor([prompt])).tolist() == [digits(answer)]


def test_counts_follow_a_binomial_distribution():
    """The query is uniform over the letters, so a count is Binomial(n, 1 / num_letters)."""
    task = CountingTask(num_letters=4, count_digits=2, train_lengths=[1, 40], eval_lengths=[40])
    _, answer = task.sample(4000, 40, torch.Generator().manual_seed(0))
    count = (answer[:, 0] - DIGIT_0) * 10 + answer[:, 1] - DIGIT_0
    assert abs(count.float().mean().item() - 10) < 0.2  # n p = 40 / 4
    assert abs(count.float().var().item() - 7.5) < 0.6  # n p (1 - p)


def test_counts_that_do_not_fit_are_refused():
    with pytest.raises(ConfigError, match=r"count up to 100 does not fit.*raise it to 3"):
        CountingTask(eval_lengths=[10, 100])
    with pytest.raises(ConfigError, match="fixed alphabet of 14 symbols"):
        CountingTask(num_symbols=4)
    assert CountingTask(num_letters=6).vocab_size == 3 + 10 + 6


@pytest.mark.slow
def test_a_small_model_learns_counting_in_distribution(tmp_path):
    lengths = ("task.train_lengths=[1,10]", "task.eval_lengths=[10]")
    record = learn(tmp_path, "counting", 1500, *lengths)
    assert record["metrics"]["test_id"]["exact_match"] >= 0.9
