"""Multi-digit addition: hand-computed sums, the vectorised carry against Python integers, runs."""

import pytest
import torch

from pelab.errors import ConfigError
from pelab.tasks.addition import END, PLUS, AdditionTask, add_little_endian
from tests.tasks.run_check import learn


def tokens(text: str) -> list[int]:
    return [PLUS if c == "+" else 3 + int(c) for c in text.replace(" ", "")]


@pytest.mark.parametrize(
    ("prompt", "answer"),
    [
        ("475+068", "0543"),
        ("999+001", "1000"),  # a carry through every digit
        ("000+000", "0000"),
        ("5+7", "12"),
        ("99999+99999", "199998"),
        ("12345+54321", "066666"),
    ],
)
@pytest.mark.parametrize("reverse_answer", [False, True])
def test_hand_computed_sums(prompt, answer, reverse_answer):
    task = AdditionTask(reverse_answer=reverse_answer)
    expected = tokens(answer[::-1] if reverse_answer else answer)
    assert task.reference(tokens(prompt)) == expected
    assert task.solve(torch.tensor([tokens(prompt)])).tolist() == [expected]


@pytest.mark.parametrize(
    ("prompt", "answer"),
    [("475+168", "643E"), ("999+101", "1100"), ("5+7", "12"), ("0+0", "0E"), ("12+34", "46E")],
)
@pytest.mark.parametrize("reverse_answer", [False, True])
def test_sums_without_leading_zeros_end_with_end(prompt, answer, reverse_answer):
    task = AdditionTask(leading_zeros=False, reverse_answer=reverse_answer)
    digits = answer.rstrip("E")
    written = digits[::-1] if reverse_answer else digits
    expected = tokens(written) + [END] * answer.count("E")
    assert task.reference(tokens(prompt)) == expected
    assert task.solve(torch.tensor([tokens(prompt)])).tolist() == [expected]
    assert task.vocab_size == 3 + 12  # END is a symbol of its own


def test_operands_without_leading_zeros_start_with_a_nonzero_digit():
    task = AdditionTask(leading_zeros=False)
    prompt, _ = task.sample(2000, 4, torch.Generator().manual_seed(0))
    assert (prompt[:, 0] != 3).all() and (prompt[:, 5] != 3).all()  # token 3 is the digit 0
    assert set(prompt[:, 0].tolist()) == set(range(4, 13))  # every first digit 1-9 occurs
    one_digit, _ = task.sample(2000, 1, torch.Generator().manual_seed(0))
    assert 3 in one_digit[:, 0].tolist()  # at length 1 an operand may be 0, as in the study


def little_endian(value: int, width: int, base: int) -> list[int]:
    return [(value // base**i) % base for i in range(width)]


@pytest.mark.parametrize("base", [2, 10])
def test_vectorised_carries_equal_python_integers(base):
    generator = torch.Generator().manual_seed(base)
    width = 60
    x = torch.randint(0, base, (200, width), generator=generator)
    y = torch.randint(0, base, (200, width), generator=generator)
    y[:50] = base - 1 - x[:50]  # column sums of base - 1: carries must run through them
    y[:50, 0] += 1  # ... started by a carry at the lowest digit
    y[:50, 0] %= base
    total = add_little_endian(x, y, base)
    for xs, ys, ts in zip(x.tolist(), y.tolist(), total.tolist(), strict=True):
        value = sum(d * base**i for i, d in enumerate(xs)) + sum(
            d * base**i for i, d in enumerate(ys)
        )
        assert ts == little_endian(value, width + 1, base)


def test_prompt_layout_and_alphabet():
    task = AdditionTask()
    assert task.length_axis == "digits per operand" and task.vocab_size == 3 + 11
    prompt, answer = task.sample(100, 5, torch.Generator().manual_seed(0))
    assert prompt.shape == (100, 11) and answer.shape == (100, 6)
    assert (prompt[:, 5] == PLUS).all() and (
        prompt[:, [0, 1, 2, 3, 4, 6, 7, 8, 9, 10]] < PLUS
    ).all()
    assert answer[:, 0].max() <= 3 + 1  # the leading digit of a 6-digit sum is 0 or 1


def test_the_alphabet_is_fixed():
    with pytest.raises(ConfigError, match="fixed alphabet of 11 symbols.*got 32"):
        AdditionTask(num_symbols=32)


@pytest.mark.slow
def test_a_small_model_learns_reversed_addition_in_distribution(tmp_path):
    """Up to 2 digits per operand: measured 100% exact match (seeds 0 and 1) in 3000 steps; in
    2000 steps seed 1 reached only 55%. At 3 digits the model stays far off within minutes: 11%
    (2 layers, 4000 steps), 8% (4 layers, 2000 steps)."""
    record = learn(
        tmp_path,
        "addition",
        3000,
        "task.reverse_answer=true",
        "task.train_lengths=[1,2]",
        "task.eval_lengths=[2]",
    )
    assert record["metrics"]["test_id"]["exact_match"] >= 0.9
