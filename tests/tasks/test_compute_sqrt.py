"""Compute sqrt (Deletang et al. 2023): the paper's examples, every number of 10 and 11 bits,
long roots, runs."""

import math

import pytest
import torch

from pelab.tasks.compute_sqrt import ONE, ZERO, ComputeSqrtTask
from tests.tasks.run_check import learn


def bits(text: str) -> list[int]:
    return [ZERO + int(c) for c in text]


@pytest.mark.parametrize(
    ("number", "root"),
    [
        # the examples of the reference's ComputeSqrt docstring; it writes 101 for the root of
        # 37, a slip: its code (math.isqrt) gives 6 = 110
        ("100101", "110"),
        ("111", "10"),  # 7 -> 2
        ("1", "1"),
        ("0001", "01"),  # 1, with leading zeros kept
        ("1111", "11"),  # 15 -> 3
        ("10000", "100"),  # 16 -> 4
        ("11111111", "1111"),  # 255 -> 15
    ],
)
def test_the_papers_examples_and_hand_computed_roots(number, root):
    assert ComputeSqrtTask.reference(bits(number)) == bits(root)
    assert ComputeSqrtTask().solve(torch.tensor([bits(number)])).tolist() == [bits(root)]


@pytest.mark.parametrize("length", [10, 11])
def test_every_number_of_a_length(length):
    numbers = torch.arange(1, 2**length)
    prompt = ZERO + (numbers[:, None] >> torch.arange(length - 1, -1, -1)) % 2
    roots = [math.isqrt(x) for x in numbers.tolist()]
    expected = [bits(f"{r:b}".zfill((length + 1) // 2)) for r in roots]
    assert ComputeSqrtTask().solve(prompt).tolist() == expected


@pytest.mark.parametrize("k", [50, 99])
def test_long_roots_at_square_boundaries(k):
    """(2^k)^2 - 1, 2^(2k) and (2^k + 1)^2 at 2k + 1 bits: the roots 2^k - 1, 2^k, 2^k + 1."""
    values = [4**k - 1, 4**k, (2**k + 1) ** 2]
    prompt = torch.tensor([bits(f"{v:b}".zfill(2 * k + 1)) for v in values])
    expected = [bits(f"{math.isqrt(v):b}".zfill(k + 1)) for v in values]
    assert ComputeSqrtTask().solve(prompt).tolist() == expected


def test_numbers_are_uniform_and_never_zero():
    prompt, answer = ComputeSqrtTask().sample(4000, 3, torch.Generator().manual_seed(0))
    assert answer.shape == (4000, 2)
    values = ((prompt == ONE).long() * torch.tensor([4, 2, 1])).sum(1)
    share = torch.bincount(values, minlength=8) / 4000
    assert share[0] == 0 and share[1:].min() > 0.12 and share[1:].max() < 0.165  # 1/7 each


@pytest.mark.slow
def test_a_small_model_learns_compute_sqrt_in_distribution(tmp_path):
    """An encoder with 4 layers, up to 8 bits (255 numbers, so largely a seen table): measured
    100% exact match (seed 0) in 2000 steps, 99 s on 2 shared cores. At 10 bits the same budget
    reached 72% (94% of tokens), at 16 bits 4.7% (66% of tokens)."""
    record = learn(
        tmp_path,
        "compute_sqrt",
        2000,
        "model=encoder",
        "model.net.n_layers=4",
        "task.train_lengths=[1,8]",
        "task.eval_lengths=[8]",
    )
    assert record["metrics"]["test_id"]["exact_match"] >= 0.9
