"""Cycle navigation (Deletang et al. 2023): the paper's examples, properties, runs."""

import pytest
import torch

from pelab.tasks.cycle_navigation import (
    LEFT,
    POSITION_0,
    RIGHT,
    STAY,
    CycleNavigationTask,
)
from tests.tasks.run_check import learn

MOVE = {"+": RIGHT, "-": LEFT, "0": STAY}


@pytest.mark.parametrize(
    ("moves", "position"),
    [
        ("+-0--", 3),  # 1 - 1 + 0 - 1 - 1 = -2 = 3 mod 5 (the paper's first example)
        ("+++-", 2),  # the paper's second example
        ("0+0-++", 2),  # the notes' "010211" with 0 stay, 1 right, 2 left
        ("+++++", 0),  # once around the cycle
        ("-", 4),
        ("0", 0),
    ],
)
def test_the_papers_examples(moves, position):
    prompt = [MOVE[m] for m in moves]
    assert CycleNavigationTask.reference(prompt) == [POSITION_0 + position]
    solved = CycleNavigationTask().solve(torch.tensor([prompt]))
    assert solved.tolist() == [[POSITION_0 + position]]


def test_the_answer_ignores_the_order_of_moves():
    task = CycleNavigationTask()
    prompt, answer = task.sample(256, 19, torch.Generator().manual_seed(0))
    shuffled = prompt[:, torch.randperm(19, generator=torch.Generator().manual_seed(1))]
    assert torch.equal(task.solve(shuffled), answer)


def test_all_five_positions_are_about_equally_likely():
    _, answer = CycleNavigationTask().sample(5000, 30, torch.Generator().manual_seed(2))
    share = torch.bincount(answer.flatten() - POSITION_0, minlength=5) / 5000
    assert share.min() > 0.17 and share.max() < 0.23


@pytest.mark.slow
def test_a_small_model_learns_cycle_navigation_in_distribution(tmp_path):
    lengths = ("task.train_lengths=[1,10]", "task.eval_lengths=[10]")
    record = learn(tmp_path, "cycle_navigation", 1000, "model=encoder", *lengths)
    assert record["metrics"]["test_id"]["exact_match"] >= 0.9
