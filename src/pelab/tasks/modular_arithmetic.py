"""Modular arithmetic: the value mod 5 of an expression over 0-4 (Deletang et al. 2023)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from pelab.tasks.base import Task, register_task
from pelab.tokens import N_SPECIAL

MODULUS = 5
SYMBOLS = (*(str(d) for d in range(MODULUS)), "+", "-", "*", "(", ")")
DIGIT_0 = N_SPECIAL  # token of digit d: DIGIT_0 + d
PLUS, MINUS, TIMES, OPEN, CLOSE = (N_SPECIAL + MODULUS + i for i in range(5))
OPERATOR_TOKENS = torch.tensor([PLUS, MINUS, TIMES])

# Products mod 5 through the discrete logarithm base 2 (2 generates the units mod 5): a product
# of non-zero residues is 2 ** (sum of their logs mod 4), so a sum replaces a sequential product.
POW2 = torch.tensor([pow(2, e, MODULUS) for e in range(MODULUS - 1)])  # [1, 2, 4, 3]
LOG2 = torch.zeros(MODULUS, dtype=torch.long).index_put_((POW2,), torch.arange(MODULUS - 1))

# Leaves of a bracketed expression, by length 1-4: d, -d, (d), (-d); DIGIT marks the digit.
DIGIT = -1
LEAVES = torch.tensor(
    [
        [0, 0, 0, 0],  # (no leaf of length 0)
        [DIGIT, 0, 0, 0],
        [MINUS, DIGIT, 0, 0],
        [OPEN, DIGIT, CLOSE, 0],
        [OPEN, MINUS, DIGIT, CLOSE],
    ]
)


@register_task("modular_arithmetic")
class ModularArithmeticTask(Task):
    """An expression over the digits 0-4 -> its value mod 5, one digit token.

    ``brackets=false`` (Deletang et al.'s regular task "Modular Arithmetic (simple)"):
    ``d op d op .. d`` with uniform digits and operators, evaluated with the usual precedence
    (``*`` first, then ``+ -`` left to right): ``BOS 1 - 1 - 1 SEP`` -> ``4``,
    ``BOS 0 * 1 + 4 * 3 - 2 SEP`` -> ``0``. Such expressions have an odd number of tokens, so
    an even length ``n`` gives an expression of ``n - 1`` tokens, as in the paper's code.

    ``brackets=true`` (the context-free task "Modular Arithmetic" with brackets, ``mult=True``
    as in the paper's experiments): an expression of exactly ``length`` tokens drawn from the
    paper's grammar: lengths 1-4 are the leaves ``d``, ``-d``, ``(d)``, ``(-d)``; a longer
    expression is ``( left op right )``, the left length uniform in ``1 .. length - 4``:
    ``BOS ( ( 3 * - 2 ) - 4 ) SEP`` -> ``0`` (``-6 - 4 = -10``). Sampled level by level of the
    expression tree, all samples and all nodes of a level at once.

    The length axis is the number of tokens of the expression. Answers are not uniform (a
    product is 0 whenever a factor is), so chance is above 20%. Fixed alphabet
    ``0 1 2 3 4 + - *``, plus ``( )`` with ``brackets``; the answer reuses the digit tokens.
    """

    length_axis = "expression tokens"
    variants = ({"brackets": True},)
    digit_tokens = tuple(range(DIGIT_0, DIGIT_0 + MODULUS))
    default_train_lengths = (1, 21)
    default_eval_lengths = (11, 21, 31, 41)

    def __init__(
        self,
        brackets: bool = False,
        **common: Any,
    ) -> None:
        self.brackets = bool(brackets)
        # without brackets the alphabet stops before "(" and ")"
        self.fixed_num_symbols = len(SYMBOLS) if self.brackets else SYMBOLS.index("(")
        super().__init__(**common)

    def prompt_length(self, length: int) -> int:
        return length if self.brackets or length % 2 == 1 else length - 1

    def answer_length(self, length: int) -> int:
        return 1

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        if self.brackets:
            return sample_bracketed(batch, length, generator)
        n = self.prompt_length(length)
        prompt = torch.empty(batch, n, dtype=torch.long)
        digits = torch.randint(0, MODULUS, (batch, n // 2 + 1), generator=generator)
        prompt[:, ::2] = DIGIT_0 + digits
        choice = torch.randint(0, len(OPERATOR_TOKENS), (batch, n // 2), generator=generator)
        prompt[:, 1::2] = OPERATOR_TOKENS[choice]
        return prompt, self.solve(prompt)

    def solve(self, prompt: Tensor) -> Tensor:
        if self.brackets:  # sampling computes these answers while it builds the trees
            return torch.tensor([self.reference(row) for row in prompt.tolist()])
        return DIGIT_0 + _evaluate_flat(prompt)[:, None]

    @staticmethod
    def reference(prompt: list[int]) -> list[int]:
        return [DIGIT_0 + _Parser(prompt).value() % MODULUS]


def _evaluate_flat(prompt: Tensor) -> Tensor:
    """``d op d .. d`` without brackets, ``[b, n]`` -> values mod 5, ``[b]``, in parallel.

    The ``+``/``-`` operators split the digits into product terms: term ids are a cumulative sum,
    each term's product comes from its zero count and its log sum (scatter-adds), and its sign
    from the operator that opens it.
    """
    b = prompt.shape[0]
    digits = prompt[:, ::2] - DIGIT_0  # [b, k]
    ops = prompt[:, 1::2]  # [b, k - 1]
    k = digits.shape[1]
    opens = torch.cat((torch.ones(b, 1, dtype=torch.bool), ops != TIMES), dim=1)  # [b, k]
    term = opens.long().cumsum(dim=1) - 1  # [b, k]: the term each digit belongs to
    sign = torch.cat((torch.ones(b, 1, dtype=torch.long), 1 - 2 * (ops == MINUS).long()), dim=1)
    zeros = torch.zeros(b, k, dtype=torch.long)
    size = zeros.scatter_add(1, term, torch.ones_like(digits))
    has_zero = zeros.scatter_add(1, term, (digits == 0).long()) > 0
    log = zeros.scatter_add(1, term, LOG2[digits]) % (MODULUS - 1)
    term_sign = torch.ones(b, k, dtype=torch.long).scatter_reduce(
        1, term, torch.where(opens, sign, 1), reduce="amin"
    )
    value = torch.where((size == 0) | has_zero, 0, POW2[log]) * term_sign  # [b, k]
    return value.sum(dim=1) % MODULUS


def sample_bracketed(
    batch: int, length: int, generator: torch.Generator, operators: Tensor = OPERATOR_TOKENS
) -> tuple[Tensor, Tensor]:
    """``batch`` expressions of exactly ``length`` tokens from the bracket grammar, each
    operator uniform over ``operators`` (``+ - *``; ``solve_equation`` takes ``+ -``), and their
    answers. Each loop step handles one depth of the trees: every node of that depth (of every
    sample) becomes a leaf (length <= 4) or ``( left op right )`` with two children one level
    deeper; values are then combined bottom-up."""
    prompt = torch.empty(batch, length, dtype=torch.long)
    rows = torch.arange(batch)  # per node: its sample, first token and length
    starts = torch.zeros(batch, dtype=torch.long)
    lengths = torch.full((batch,), length, dtype=torch.long)
    levels = []
    while rows.numel():
        n = rows.numel()
        leaf = lengths <= 4
        digit = torch.randint(0, MODULUS, (n,), generator=generator)
        uniform = torch.rand(n, generator=generator, dtype=torch.float64)
        op = torch.randint(0, len(operators), (n,), generator=generator)
        # leaves: write their pattern, value +-digit
        pattern = LEAVES[lengths[leaf]]  # [l, 4]
        pattern = torch.where(pattern == DIGIT, DIGIT_0 + digit[leaf, None], pattern)
        offset = torch.arange(4)
        inside = offset < lengths[leaf, None]
        columns = starts[leaf, None] + offset
        prompt[rows[leaf, None].expand_as(columns)[inside], columns[inside]] = pattern[inside]
        leaf_value = torch.where(lengths[leaf] % 2 == 0, -digit[leaf], digit[leaf]) % MODULUS
        # inner nodes: ( left op right ), left length uniform in 1 .. length - 4
        inner = ~leaf
        r, s, m = rows[inner], starts[inner], lengths[inner]
        left = 1 + (uniform[inner] * (m - 4)).long()
        op_token = operators[op[inner]]
        prompt[r, s] = OPEN
        prompt[r, s + 1 + left] = op_token
        prompt[r, s + m - 1] = CLOSE
        levels.append((leaf, leaf_value, op_token))
        rows = torch.cat((r, r))
        starts = torch.cat((s + 1, s + 2 + left))
        lengths = torch.cat((left, m - 3 - left))
    value = torch.empty(0, dtype=torch.long)
    for leaf, leaf_value, op_token in reversed(levels):
        n_inner = op_token.numel()
        a, b = value[:n_inner], value[n_inner:]
        difference_or_product = torch.where(op_token == MINUS, a - b, a * b)
        combined = torch.where(op_token == PLUS, a + b, difference_or_product)
        value = torch.empty(leaf.numel(), dtype=torch.long)
        value[leaf] = leaf_value
        value[~leaf] = combined % MODULUS
    return prompt, DIGIT_0 + value[:, None]


class _Parser:
    """Recursive descent over the tokens, the usual precedence (the reference solver):
    ``expr := term (('+' | '-') term)*``, ``term := factor ('*' factor)*``,
    ``factor := digit | '-' factor | '(' expr ')'``."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens, self.at = tokens, 0

    def value(self) -> int:
        result = self.expr()
        if self.at != len(self.tokens):
            raise ValueError(f"unparsed tokens after position {self.at}: {self.tokens}")
        return result

    def peek(self) -> int | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self) -> int:
        self.at += 1
        return self.tokens[self.at - 1]

    def expr(self) -> int:
        result = self.term()
        while self.peek() in (PLUS, MINUS):
            operator = self.take()
            term = self.term()
            result = result + term if operator == PLUS else result - term
        return result

    def term(self) -> int:
        result = self.factor()
        while self.peek() == TIMES:
            self.take()
            result *= self.factor()
        return result

    def factor(self) -> int:
        token = self.take()
        if token == MINUS:
            return -self.factor()
        if token == OPEN:
            result = self.expr()
            if self.take() != CLOSE:
                raise ValueError(f"missing ')' before position {self.at}: {self.tokens}")
            return result
        if not DIGIT_0 <= token < DIGIT_0 + MODULUS:
            raise ValueError(f"expected a digit at position {self.at - 1}: {self.tokens}")
        return token - DIGIT_0
