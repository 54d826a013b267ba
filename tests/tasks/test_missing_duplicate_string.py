"""Missing duplicate string (Deletang et al. 2023): the paper's examples, the layout of sampled
prompts, runs."""

import pytest
import torch

from pelab.errors import ConfigError
from pelab.tasks.missing_duplicate_string import (
    EMPTY,
    MISSING,
    ONE,
    ZERO,
    MissingDuplicateStringTask,
)
from tests.tasks.run_check import learn


def tokens(text: str) -> list[int]:
    return [{"0": ZERO, "1": ONE, "?": MISSING, "_": EMPTY}[c] for c in text]


@pytest.mark.parametrize(
    ("prompt", "answer"),
    [
        # the examples of the reference's MissingDuplicateString docstring (its 2 is ?, 3 is _)
        ("011001?0", "1"),
        ("1011?1_", "0"),
        ("?1", "1"),
        ("0?", "0"),
        ("?01100_", "1"),  # the hole in the first copy
    ],
)
def test_the_papers_examples_and_hand_worked_ones(prompt, answer):
    assert MissingDuplicateStringTask.reference(tokens(prompt)) == tokens(answer)
    solved = MissingDuplicateStringTask().solve(torch.tensor([tokens(prompt)]))
    assert solved.tolist() == [tokens(answer)]


@pytest.mark.parametrize("length", [2, 9, 10])
def test_prompts_are_a_string_twice_with_one_hole(length):
    prompt, answer = MissingDuplicateStringTask().sample(
        3000, length, torch.Generator().manual_seed(length)
    )
    half = length // 2
    assert ((prompt == MISSING).sum(1) == 1).all()
    assert ((prompt == EMPTY).sum(1) == length % 2).all()
    filled = prompt.clone()
    hole = (prompt == MISSING).long().argmax(1)
    filled[torch.arange(3000), hole] = answer[:, 0]
    assert torch.equal(filled[:, :half], filled[:, half : 2 * half])
    share = torch.bincount(hole, minlength=2 * half) / 3000  # uniform over both copies
    assert share.min() > 0.5 / (2 * half) and share.max() < 1.5 / (2 * half)


def test_lengths_below_two_are_refused():
    with pytest.raises(ConfigError, match="lengths must be >= 2.*got 1"):
        MissingDuplicateStringTask(train_lengths=[1, 8], eval_lengths=[8])


@pytest.mark.slow
def test_a_small_model_learns_missing_duplicate_string_in_distribution(tmp_path):
    """An encoder with 4 layers, up to 9 tokens (4-bit strings): measured 100% exact match
    (seed 0) in 2000 steps, 155 s on 2 shared cores."""
    record = learn(
        tmp_path,
        "missing_duplicate_string",
        2000,
        "model=encoder",
        "model.net.n_layers=4",
        "task.train_lengths=[2,9]",
        "task.eval_lengths=[9]",
    )
    assert record["metrics"]["test_id"]["exact_match"] >= 0.9
