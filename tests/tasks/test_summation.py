"""Summation mod 10 (Kazemnejad et al. 2023): hand-computed answers, properties, runs."""

import pytest
import torch

from pelab.errors import ConfigError
from pelab.tasks.summation import SummationTask
from tests.tasks.run_check import learn


def digits(text: str) -> list[int]:
    return [3 + int(c) for c in text]


@pytest.mark.parametrize(
    ("terms", "answer"), [("3318", "5"), ("9", "9"), ("55", "0"), ("99999", "5")]
)
def test_hand_computed_answers(terms, answer):
    assert SummationTask.reference(digits(terms)) == digits(answer)
    assert SummationTask().solve(torch.tensor([digits(terms)])).tolist() == [digits(answer)]


def test_terms_are_digits_1_to_9_and_every_term_matters():
    task = SummationTask()
    prompt, answer = task.sample(500, 12, torch.Generator().manual_seed(0))
    assert sorted(prompt.unique().tolist()) == list(range(4, 13)) and answer.shape == (500, 1)
    bumped = prompt.clone()
    bumped[:, 7] = torch.where(bumped[:, 7] == 12, 4, bumped[:, 7] + 1)  # one term +1 (9 -> 1)
    delta = (task.solve(bumped) - answer) % 10
    assert set(delta.flatten().tolist()) <= {1, 2}  # +1, or +2 when 9 wrapped to 1 (-8 = +2)
    assert (delta != 0).all()


def test_the_alphabet_is_fixed():
    with pytest.raises(ConfigError, match="fixed alphabet of 10 symbols"):
        SummationTask(num_symbols=32)


@pytest.mark.slow
def test_a_small_model_learns_summation_in_distribution(tmp_path):
    """Up to 4 terms: measured 98.8% exact match after 4000 steps. With up to 8 terms the default
    model stayed at chance (11.7%) after 4000 steps: the sum mod 10 of many terms is hard for a
    2-layer model (as parity is), which is what the longer lengths of this task probe."""
    record = learn(
        tmp_path, "summation", 4000, "task.train_lengths=[1,4]", "task.eval_lengths=[4]"
    )
    assert record["metrics"]["test_id"]["exact_match"] >= 0.9
