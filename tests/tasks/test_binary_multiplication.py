"""Binary multiplication (Deletang et al. 2023): the paper's examples, long carries, runs."""

import pytest
import torch

from pelab.errors import ConfigError
from pelab.tasks.binary_addition import END, ONE, ZERO
from pelab.tasks.binary_multiplication import TIMES, BinaryMultiplicationTask
from tests.tasks.run_check import learn


def tokens(text: str) -> list[int]:
    return [{"0": ZERO, "1": ONE, "*": TIMES, "$": END}[c] for c in text]


@pytest.mark.parametrize(
    ("prompt", "answer"),
    [
        # the examples of the reference's BinaryMultiplication docstring
        ("001*01101", "0001101$0"),  # 4 * 22 = 88
        ("1001*000001", "000001001$0"),  # 9 * 32 = 288
        ("1*1", "1$0"),
        ("01*1", "01$0"),  # 2 * 1 = 2
        ("11*11", "1001$"),  # 3 * 3 = 9: the product fills length - 1 bits
        ("111*111", "100011$"),  # 7 * 7 = 49
        ("101*011", "01111$0"),  # 5 * 6 = 30
    ],
)
def test_the_papers_examples_and_hand_computed_products(prompt, answer):
    assert BinaryMultiplicationTask.reference(tokens(prompt)) == tokens(answer)
    solved = BinaryMultiplicationTask().solve(torch.tensor([tokens(prompt)]))
    assert solved.tolist() == [tokens(answer)]


@pytest.mark.parametrize("split", [1, 30, 59, 99])
def test_long_operands_of_ones_carry_exactly(split):
    """(2^n - 1) * (2^m - 1) at 101 tokens: column sums up to 50, carries across the product."""
    prompt = tokens("1" * split + "*" + "1" * (100 - split))
    expected = BinaryMultiplicationTask.reference(prompt)
    assert BinaryMultiplicationTask().solve(torch.tensor([prompt])).tolist() == [expected]
    value = (2**split - 1) * (2 ** (100 - split) - 1)
    assert expected[: value.bit_length()] == tokens(f"{value:b}"[::-1])


def test_the_answer_has_length_tokens_and_one_end():
    task = BinaryMultiplicationTask()
    prompt, answer = task.sample(256, 9, torch.Generator().manual_seed(0))
    assert prompt.shape == answer.shape == (256, 9)
    assert ((prompt == TIMES).sum(1) == 1).all() and ((answer == END).sum(1) == 1).all()
    assert task.vocab_size == 3 + 4


def test_lengths_below_three_are_refused():
    with pytest.raises(ConfigError, match="BinaryMultiplicationTask: lengths must be >= 3.*got 1"):
        BinaryMultiplicationTask(train_lengths=[1, 8], eval_lengths=[8])


@pytest.mark.slow
def test_a_small_model_learns_binary_multiplication_in_distribution(tmp_path):
    """An encoder with 4 layers, up to 6 prompt tokens (the setting of binary_addition's test):
    measured 100% exact match (seed 0) in 2000 steps, 127 s on 2 shared cores."""
    record = learn(
        tmp_path,
        "binary_multiplication",
        2000,
        "model=encoder",
        "model.net.n_layers=4",
        "task.train_lengths=[3,6]",
        "task.eval_lengths=[6]",
    )
    assert record["metrics"]["test_id"]["exact_match"] >= 0.9
