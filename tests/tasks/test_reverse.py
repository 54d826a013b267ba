"""Reverse: hand-written answers, properties, runs."""

import pytest
import torch

from pelab.tasks.reverse import ReverseTask
from tests.tasks.run_check import learn


def test_hand_written_answers():
    assert ReverseTask.reference([5, 3, 4, 3]) == [3, 4, 3, 5]
    assert ReverseTask().solve(torch.tensor([[5, 3, 4, 3], [3, 4, 5, 6]])).tolist() == [
        [3, 4, 3, 5],
        [6, 5, 4, 3],
    ]


def test_reversing_twice_is_the_identity():
    task = ReverseTask()
    prompt, answer = task.sample(64, 13, torch.Generator().manual_seed(0))
    assert torch.equal(task.solve(answer), prompt)


@pytest.mark.slow
def test_a_small_model_learns_reverse_in_distribution(tmp_path):
    record = learn(tmp_path, "reverse", 2000, "task.train_lengths=[1,8]", "task.eval_lengths=[8]")
    assert record["metrics"]["test_id"]["exact_match"] >= 0.9
