"""Polynomial evaluation mod 10 (Kazemnejad et al. 2023): hand-computed values, the study's
ranges, runs."""

import pytest
import torch

from pelab.errors import ConfigError
from pelab.tasks.polynomial_evaluation import EQUALS, MINUS, PLUS, PolynomialEvaluationTask, X
from tests.tasks.run_check import learn


def tokens(x: int, terms: list[tuple[int, int]]) -> list[int]:
    """``x = s v`` then ``s c x d`` per term ``(coefficient, degree)``."""

    def signed(value: int) -> list[int]:
        return [MINUS if value < 0 else PLUS, 3 + abs(value)]

    prompt = [X, EQUALS, *signed(x)]
    for coefficient, degree in terms:
        prompt += [*signed(coefficient), X, 3 + degree]
    return prompt


@pytest.mark.parametrize(
    ("x", "terms", "value"),
    [
        # the study's example (poly_instance_processor.py, __main__): -13 mod 10 = 7
        (1, [(-2, 2), (-1, 0), (-3, 3), (-1, 1), (-3, 0), (-3, 2)], 7),
        (-2, [(3, 3), (-1, 0)], 5),  # 3 * -8 - 1 = -25
        (2, [(3, 3), (3, 3), (2, 1)], 2),  # 24 + 24 + 4 = 52
        (0, [(2, 0), (3, 2), (-1, 1)], 2),  # 0^0 = 1: only the constant term counts
        (-1, [(0, 3), (-3, 1)], 3),  # a zero coefficient; -3 * -1 = 3
        (-2, [(-3, 3)], 4),  # 24
    ],
)
def test_hand_computed_values(x, terms, value):
    prompt = tokens(x, terms)
    assert PolynomialEvaluationTask.reference(prompt) == [3 + value]
    assert PolynomialEvaluationTask().solve(torch.tensor([prompt])).tolist() == [[3 + value]]


def test_prompts_follow_the_studys_ranges_and_layout():
    task = PolynomialEvaluationTask()
    prompt, answer = task.sample(4000, 6, torch.Generator().manual_seed(0))
    assert prompt.shape == (4000, 28) and answer.shape == (4000, 1)
    assert (prompt[:, 0] == X).all() and (prompt[:, 1] == EQUALS).all()
    x = torch.where(prompt[:, 2] == MINUS, -1, 1) * (prompt[:, 3] - 3)
    assert sorted(x.unique().tolist()) == [-2, -1, 0, 1, 2]
    terms = prompt[:, 4:].unflatten(1, (6, 4))
    coefficients = torch.where(terms[..., 0] == MINUS, -1, 1) * (terms[..., 1] - 3)
    assert sorted(coefficients.unique().tolist()) == list(range(-3, 4))
    assert (terms[..., 1][terms[..., 0] == MINUS] > 3).all()  # zero is written + 0
    assert (terms[..., 2] == X).all()
    assert sorted((terms[..., 3] - 3).unique().tolist()) == [0, 1, 2, 3]
    assert sorted((answer - 3).unique().tolist()) == list(range(10))


@pytest.mark.parametrize("term", [0, 5, 7])
def test_every_term_moves_the_value(term):
    """Term ``term`` set to ``+1 x^0`` and then to ``+2 x^0``: the value moves by exactly 1."""
    task = PolynomialEvaluationTask()
    prompt, _ = task.sample(500, 8, torch.Generator().manual_seed(term))
    start = 4 + 4 * term
    one, two = prompt.clone(), prompt.clone()
    one[:, start : start + 4] = torch.tensor([PLUS, 3 + 1, X, 3])
    two[:, start : start + 4] = torch.tensor([PLUS, 3 + 2, X, 3])
    assert ((task.solve(two) - task.solve(one)) % 10 == 1).all()


def test_the_alphabet_is_fixed():
    with pytest.raises(ConfigError, match="fixed alphabet of 14 symbols.*got 32"):
        PolynomialEvaluationTask(num_symbols=32)


@pytest.mark.slow
def test_a_small_model_learns_polynomial_evaluation_in_distribution(tmp_path):
    """Up to 2 terms, 4 layers: measured 94.1% exact match (chance 26%) in 6000 steps, 530 s on
    a shared CPU (88.7% in 4000 steps), one seed, so the bar is 85% rather than 90%. Two layers
    reached 71% in 4000 steps; on the study's 1-8 terms the 2-layer model stays near chance
    (23.6%, chance 14%, ``experiment=nope_decoder_cpu study_task=nope/polynomial_evaluation``):
    each term is a lookup of ``c x^d`` against the ``x`` at the start, then all are summed mod
    10, which is as hard for a small model as ``summation``."""
    record = learn(
        tmp_path,
        "polynomial_evaluation",
        6000,
        "model.net.n_layers=4",
        "task.train_lengths=[1,2]",
        "task.eval_lengths=[2]",
    )
    assert record["metrics"]["test_id"]["exact_match"] >= 0.85
