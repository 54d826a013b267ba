"""Polynomial evaluation mod 10 (Kazemnejad et al. 2023, the NoPE study's ``s2s_poly``)."""

import torch
from torch import Tensor

from pelab.tasks.base import Task, register_task
from pelab.tokens import N_SPECIAL

PLUS, MINUS, X, EQUALS = (N_SPECIAL + 10 + i for i in range(4))  # digit d is N_SPECIAL + d
MAX_COEFFICIENT, MAX_DEGREE, MAX_X = 3, 3, 2  # the study's ranges
MODULUS = 10  # the study's modulo_factor
TERM = 4  # tokens per term: sign, |coefficient|, x, degree


@register_task("polynomial_evaluation")
class PolynomialEvaluationTask(Task):
    """``p(x) = sum_i c_i * x^(d_i)`` at one point, mod 10; length axis: number of terms.

    As the study's generator (McGill-NLP/length-generalization,
    ``scripts/dataset_builders/make_poly_dataset.py``) and answer (``poly_instance_processor``,
    ``modulo_factor: 10``): per sample, each coefficient is uniform on ``-3 .. 3``, each degree on
    ``0 .. 3`` (terms may repeat a degree), the point ``x`` on ``-2 .. 2``; the answer is one
    digit, ``p(x) mod 10`` taken non-negative (``0^0 = 1``). Every term enters the sum, as in
    ``summation``, and each term's value depends on ``x`` at the start of the prompt.

    Tokens: digits ``0-9`` are ``3 + d``, then ``+ - x =``. The prompt is ``x = s v`` (the point,
    its sign always written) then ``length`` terms of four tokens ``s c x d`` (sign, absolute
    coefficient, ``x``, degree; a zero coefficient is written ``+ 0``): ``4 * length + 4`` tokens.
    Example (the study's own, ``poly_instance_processor.py``'s ``__main__``), ``x = 1``,
    ``-2x^2 - 1x^0 - 3x^3 - 1x^1 - 3x^0 - 3x^2 = -13``:
    ``BOS x = + 1 - 2 x 2 - 1 x 0 - 3 x 3 - 1 x 1 - 3 x 0 - 3 x 2 SEP`` -> ``7``.
    The study writes text (``Evaluate at x = - 1 in - 2 * x ** 2 + 3 * x ** 0 ? ``) with a sign
    only on negative numbers; pelab writes every sign so each term has a fixed width.
    """

    length_axis = "terms"
    fixed_num_symbols = 14  # 10 digits, + - x =
    digit_tokens = tuple(range(N_SPECIAL, N_SPECIAL + 10))  # one-digit numbers, as summation
    default_train_lengths = (1, 8)
    default_eval_lengths = (4, 8, 12, 16)

    def prompt_length(self, length: int) -> int:
        return TERM * length + 4

    def answer_length(self, length: int) -> int:
        return 1

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        coefficients = torch.randint(
            -MAX_COEFFICIENT, MAX_COEFFICIENT + 1, (batch, length), generator=generator
        )
        degrees = torch.randint(0, MAX_DEGREE + 1, (batch, length), generator=generator)
        x = torch.randint(-MAX_X, MAX_X + 1, (batch, 1), generator=generator)
        head = torch.stack(
            (torch.full_like(x, X), torch.full_like(x, EQUALS), sign_of(x), x.abs() + N_SPECIAL),
            dim=2,
        )  # [b, 1, 4]
        terms = torch.stack(
            (
                sign_of(coefficients),
                coefficients.abs() + N_SPECIAL,
                torch.full_like(degrees, X),
                degrees + N_SPECIAL,
            ),
            dim=2,
        )  # [b, n, 4]
        prompt = torch.cat((head, terms), dim=1).flatten(1)  # [b, 4 + 4n]
        return prompt, self.solve(prompt)

    def solve(self, prompt: Tensor) -> Tensor:
        x = value_of(prompt[:, 2], prompt[:, 3])  # [b]
        terms = prompt[:, 4:].unflatten(1, (-1, TERM))  # [b, n, 4]
        coefficients = value_of(terms[..., 0], terms[..., 1])  # [b, n]
        degrees = terms[..., 3] - N_SPECIAL
        total = (coefficients * x[:, None] ** degrees).sum(dim=1, keepdim=True)  # [b, 1]
        return total % MODULUS + N_SPECIAL

    @staticmethod
    def reference(prompt: list[int]) -> list[int]:
        def number(sign: int, digit: int) -> int:
            return (digit - N_SPECIAL) * (-1 if sign == MINUS else 1)

        assert prompt[:2] == [X, EQUALS]
        x = number(prompt[2], prompt[3])
        total = 0
        for i in range(4, len(prompt), TERM):
            sign, digit, variable, degree = prompt[i : i + TERM]
            assert variable == X
            total += number(sign, digit) * x ** (degree - N_SPECIAL)
        return [N_SPECIAL + total % MODULUS]


def sign_of(values: Tensor) -> Tensor:
    """The sign tokens of ``values`` (``+`` for zero), same shape."""
    return torch.where(values < 0, MINUS, PLUS)


def value_of(sign: Tensor, digit: Tensor) -> Tensor:
    """The integer a sign token and a digit token write (any matching shapes)."""
    return torch.where(sign == MINUS, -1, 1) * (digit - N_SPECIAL)
