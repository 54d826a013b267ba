"""Odds first (Deletang et al. 2023): the paper's definition and examples, properties, runs."""

import pytest
import torch

from pelab.tasks.odds_first import OddsFirstTask
from tests.tasks.run_check import learn


def symbols(text: str, alphabet: str) -> list[int]:
    return [3 + alphabet.index(c) for c in text]


@pytest.mark.parametrize(
    ("text", "answer", "alphabet"),
    [
        ("aaabaa", "aaaaba", "ab"),  # the paper's example: t1 t3 t5 t2 t4 t6
        ("00110101", "01000111", "01"),  # the released code's docstring example
        ("110", "101", "01"),
        ("a", "a", "ab"),
        ("abcdefg", "acegbdf", "abcdefg"),
    ],
)
def test_hand_written_answers(text, answer, alphabet):
    prompt = symbols(text, alphabet)
    assert OddsFirstTask.reference(prompt) == symbols(answer, alphabet)
    task = OddsFirstTask(num_symbols=len(alphabet))
    assert task.solve(torch.tensor([prompt])).tolist() == [symbols(answer, alphabet)]


def test_the_answer_is_a_permutation_of_the_prompt():
    task = OddsFirstTask(num_symbols=30)
    prompt, answer = task.sample(32, 15, torch.Generator().manual_seed(0))
    assert torch.equal(prompt.sort(dim=1).values, answer.sort(dim=1).values)


@pytest.mark.slow
def test_a_small_model_learns_odds_first_in_distribution(tmp_path):
    """Binary, so placed by position alone: 4 layers at up to 6 tokens measured 100% exact match
    (seeds 0 and 1) in 2000 steps; 2 layers reached 75% (6 tokens) and 20% (8 tokens)."""
    record = learn(
        tmp_path,
        "odds_first",
        2000,
        "model.net.n_layers=4",
        "task.train_lengths=[1,6]",
        "task.eval_lengths=[6]",
    )
    assert record["metrics"]["test_id"]["exact_match"] >= 0.9
