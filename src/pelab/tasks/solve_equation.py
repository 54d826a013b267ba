"""Solve equation (Deletang et al. 2023, deterministic context-free): a bracketed equation mod 5
with one unknown ``x`` -> the value of ``x``."""

from __future__ import annotations

import torch
from torch import Tensor

from pelab.tasks import modular_arithmetic as arithmetic
from pelab.tasks.base import Task, register_task

MODULUS = arithmetic.MODULUS
SYMBOLS = (*(str(d) for d in range(MODULUS)), "+", "-", "(", ")", "x", "=")
DIGIT_0 = arithmetic.DIGIT_0  # token of digit d: DIGIT_0 + d
# the digits, + and - are modular_arithmetic's tokens; its * is not in this alphabet
PLUS, MINUS = arithmetic.PLUS, arithmetic.MINUS
OPEN, CLOSE, X, EQUALS = (MINUS + 1 + i for i in range(4))
OPERATORS = torch.tensor([PLUS, MINUS])
TO_ARITHMETIC = {OPEN: arithmetic.OPEN, CLOSE: arithmetic.CLOSE}
FROM_ARITHMETIC = torch.arange(arithmetic.CLOSE + 1)  # a lookup table: token -> token
FROM_ARITHMETIC[[arithmetic.OPEN, arithmetic.CLOSE]] = torch.tensor([OPEN, CLOSE])


@register_task("solve_equation")
class SolveEquationTask(Task):
    """``expression = v`` with one digit of the expression replaced by ``x`` -> the value of
    ``x`` mod 5, as in the paper (its ``SolveEquation``); length axis: tokens of the equation,
    at least 3.

    The expression (``length - 2`` tokens) is ``modular_arithmetic_brackets``' grammar with
    ``+`` and ``-`` only, as the paper's code (``mult=False``: a product could have several
    solutions): lengths 1-4 are ``d``, ``-d``, ``(d)``, ``(-d)``, longer ones ``( left op right )``
    with the left length uniform in ``1 .. length - 4``; ``v`` is its value mod 5. The unknown
    replaces the first digit at or after a uniform position of the expression (cyclically), as
    the paper's code picks it. The answer is one digit token. Tokens: digits ``0-4 -> 3-7``,
    ``+ -> 8``, ``- -> 9``, ``( -> 10``, ``) -> 11``, ``x -> 12``, ``= -> 13``. Example:
    ``BOS ( ( 3 - x ) + - 2 ) = 4 SEP`` -> ``2`` (``3 - 2 - 2 = -1 = 4``).

    Solved in parallel: without products every digit counts with a sign, ``-1`` to the power of
    the minus signs that apply to it: a unary minus (only ever right before a digit in this
    grammar) and each binary minus whose right operand holds it. A binary minus applies from
    where it stands to its bracket's ``)``; sorting the brackets and binary operators stably by
    depth lines up each ``)`` right after its bracket's operator, which tells which ``)`` end a
    minus. Then ``x = sign_x * (v - sum of signed digits)`` mod 5.
    """

    fixed_num_symbols = len(SYMBOLS)
    digit_tokens = tuple(range(DIGIT_0, DIGIT_0 + MODULUS))
    length_axis = "equation tokens"
    default_train_lengths = (3, 21)
    default_eval_lengths = (11, 21, 31, 41)

    min_length = 3
    min_length_why = "an expression of at least one token, = and the value"

    def answer_length(self, length: int) -> int:
        return 1

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        n = length - 2  # expression tokens
        expression, value = arithmetic.sample_bracketed(batch, n, generator, OPERATORS)
        expression = FROM_ARITHMETIC[expression]  # [b, n]
        start = torch.randint(0, n, (batch, 1), generator=generator)
        after_start = (torch.arange(n) - start) % n  # [b, n]: distance from start, cyclically
        is_digit = expression < DIGIT_0 + MODULUS
        hole = torch.where(is_digit, after_start, n).argmin(dim=1, keepdim=True)  # [b, 1]
        answer = expression.gather(1, hole)
        expression.scatter_(1, hole, X)
        equals = torch.full((batch, 1), EQUALS)
        return torch.cat((expression, equals, value), dim=1), answer

    def solve(self, prompt: Tensor) -> Tensor:
        expression, value = prompt[:, :-2], prompt[:, -1] - DIGIT_0  # [b, n], [b]
        batch, n = expression.shape
        is_open, is_close = expression == OPEN, expression == CLOSE
        depth = is_open.long().cumsum(1) - is_close.long().cumsum(1)  # [b, n], after each token
        before = _shifted(expression, OPEN)  # the token before each (a "(" before the first)
        after_operand = (before < DIGIT_0 + MODULUS) | (before == X) | (before == CLOSE)
        binary = ((expression == PLUS) | (expression == MINUS)) & after_operand
        unary = (expression == MINUS) & ~after_operand
        binary_minus = binary & (expression == MINUS)
        # the depth of the bracket each "(", ")" and binary operator belongs to; others last
        level = torch.where(is_open | binary, depth, torch.where(is_close, depth + 1, n + 1))
        order = level.argsort(dim=1, stable=True)  # [b, n]
        ordered_close = expression.gather(1, order) == CLOSE
        ordered_end = ordered_close & _shifted(binary_minus.gather(1, order), False)
        ends_minus = torch.zeros_like(binary).scatter(1, order, ordered_end)  # ")" of a minus
        flips = binary_minus | ends_minus  # [b, n]
        negated = (flips.long().cumsum(1) + _shifted(unary, False).long()) % 2
        sign = 1 - 2 * negated  # [b, n]
        digit = torch.where(expression < DIGIT_0 + MODULUS, expression - DIGIT_0, 0)
        known = (sign * digit).sum(dim=1)  # [b]: the expression's value with x = 0
        sign_x = (sign * (expression == X)).sum(dim=1)  # [b]: +-1
        return DIGIT_0 + ((sign_x * (value - known)) % MODULUS)[:, None]

    @staticmethod
    def reference(prompt: list[int]) -> list[int]:
        expression, value = prompt[:-2], prompt[-1]
        solutions = [
            candidate
            for candidate in range(MODULUS)
            if arithmetic.ModularArithmeticTask.reference(
                [DIGIT_0 + candidate if t == X else TO_ARITHMETIC.get(t, t) for t in expression]
            )
            == [value]
        ]
        (solution,) = solutions  # unique: without products x counts once, with sign +-1
        return [DIGIT_0 + solution]


def _shifted(rows: Tensor, first: int | bool) -> Tensor:
    """``rows [b, n]`` moved one place right with ``first`` in front (entry ``j`` is ``j - 1``)."""
    return torch.cat((torch.full_like(rows[:, :1], first), rows[:, :-1]), dim=1)
