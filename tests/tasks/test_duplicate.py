"""Duplicate string (Deletang et al. 2023): the paper's examples, properties, runs."""

import pytest
import torch

from pelab.tasks.duplicate import DuplicateTask
from tests.tasks.run_check import learn


def bits(text: str) -> list[int]:
    return [3 + int(c) for c in text]


@pytest.mark.parametrize(("text", "answer"), [("101", "101101"), ("111111", "111111111111")])
def test_the_papers_examples(text, answer):
    assert DuplicateTask.reference(bits(text)) == bits(answer)
    assert DuplicateTask().solve(torch.tensor([bits(text)])).tolist() == [bits(answer)]


def test_binary_by_default_and_both_halves_equal_the_prompt():
    task = DuplicateTask()
    assert task.vocab_size == 3 + 2
    prompt, answer = task.sample(32, 11, torch.Generator().manual_seed(0))
    assert answer.shape == (32, 22)
    assert torch.equal(answer[:, :11], prompt) and torch.equal(answer[:, 11:], prompt)


@pytest.mark.slow
def test_a_small_model_learns_duplicate_in_distribution(tmp_path):
    """Binary strings leave no content to match, so the copy is by position alone: 4 layers at
    up to 6 bits measured 100% exact match (seeds 0 and 1) in 2000 steps. 2 layers reached
    96.5% at 6 bits but only 9% at 8 bits (4 layers: 85% and 68% at 8 bits, seeds 0 and 1)."""
    record = learn(
        tmp_path,
        "duplicate",
        2000,
        "model.net.n_layers=4",
        "task.train_lengths=[1,6]",
        "task.eval_lengths=[6]",
    )
    assert record["metrics"]["test_id"]["exact_match"] >= 0.9
