"""LEGO (Zhang et al. 2022, "Unveiling Transformers with LEGO"; the NoPE study's ``s2s_lego``):
resolve a chain of sign assignments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from pelab.errors import ConfigError
from pelab.tasks.base import Task, register_task
from pelab.tokens import N_SPECIAL

EQUALS, PLUS, MINUS, ONE = (N_SPECIAL + i for i in range(4))
FIRST_NAME = N_SPECIAL + 4  # variable names follow the four fixed symbols
CLAUSE = 4  # tokens per clause: name, =, sign, operand


@register_task("lego")
class LegoTask(Task):
    """A chain of ``length`` variables, each assigned a sign times the previous one; length axis:
    variables (clauses).

    As the study's generator (McGill-NLP/length-generalization,
    ``scripts/dataset_builders/make_lego_dataset.py``, taken from Zhang et al.'s code): the
    variables are ``length`` distinct names drawn from ``num_names`` (the study: the 26 letters),
    their values ``+1``/``-1`` uniform and independent; the chain's first clause assigns its
    value (``a = +1``), each next one assigns ``+`` or ``-`` the previous variable (``b = -a``
    when their values differ); ``shuffle: true`` (default, the study's examples) presents the
    clauses in a uniformly random order, ``false`` in chain order.

    Tokens: ``= + - 1`` are ``3 .. 6``, the names ``7 ..``; each clause is four tokens
    ``name = sign operand`` (operand ``1`` or a name). The answer, ``query: false`` (default,
    Zhang et al.'s labels): the value of every clause's variable, in prompt order, as ``+``/``-``
    (``length`` tokens). ``query: true`` (the NoPE study's question "what is the value of q?"):
    the prompt ends with one name, drawn uniformly from the second half of the chain (chain
    positions ``ceil(length / 2) .. length - 1``, counted from 0, as the study; the only
    variable at length 1, which the study does not build), and the answer is its value (one
    token). Example (the study's, ``lego_instance_processor.py``'s ``__main__``):
    ``BOS c = + t r = + f t = - q q = - 1 f = - c c SEP`` -> ``+`` with ``query: true``;
    without the final ``c``, ``query: false``: ``+ - + - -`` (c, r, t, q, f).
    The study writes text (``If c = + t, r = + f, .... Then, what is the value of c?``, answer
    ``+1``); pelab writes the symbols, and the answer's sign alone.
    """

    length_axis = "variables"
    default_train_lengths = (1, 8)
    default_eval_lengths = (4, 8, 12, 16)
    variants = ({"query": True}, {"shuffle": False})

    def __init__(
        self, num_names: int = 26, query: bool = False, shuffle: bool = True, **kwargs: Any
    ) -> None:
        if num_names < 1:
            raise ConfigError(f"LegoTask: task.num_names must be >= 1, got {num_names}")
        self.num_names, self.query, self.shuffle = int(num_names), bool(query), bool(shuffle)
        self.fixed_num_symbols = 4 + self.num_names
        super().__init__(**kwargs)

    @classmethod
    def settings_at(cls, length: int, directory: Path) -> dict[str, Any]:
        return {"num_names": length}  # a distinct name per variable

    def check_length(self, length: int) -> None:
        super().check_length(length)
        if length > self.num_names:
            raise ConfigError(
                f"LegoTask: a chain of {length} variables needs {length} distinct names but "
                f"task.num_names is {self.num_names}; raise task.num_names to at least {length} "
                "or use shorter lengths"
            )

    def prompt_length(self, length: int) -> int:
        return CLAUSE * length + self.query

    def answer_length(self, length: int) -> int:
        return 1 if self.query else length

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        # the n largest of num_names uniform draws: distinct names in random (chain) order
        scores = torch.rand(batch, self.num_names, generator=generator)
        names = FIRST_NAME + scores.topk(length, dim=1).indices  # [b, n]
        values = torch.randint(0, 2, (batch, length), generator=generator)  # 1: +1, 0: -1
        agree = (values[:, 1:] == values[:, :-1]).long()  # [b, n - 1]
        plus = torch.cat((values[:, :1], agree), dim=1)  # [b, n]: 1 where a clause writes +
        operands = torch.cat((torch.full_like(names[:, :1], ONE), names[:, :-1]), dim=1)
        clauses = torch.stack(
            (names, torch.full_like(names, EQUALS), torch.where(plus == 1, PLUS, MINUS), operands),
            dim=2,
        )  # [b, n, 4] in chain order; the first clause's sign is its variable's value
        if self.shuffle:
            order = torch.rand(batch, length, generator=generator).argsort(dim=1)
            clauses = clauses.gather(1, order[..., None].expand_as(clauses))
        prompt = clauses.flatten(1)  # [b, 4n]
        if self.query:
            first = (length + 1) // 2 if length > 1 else 0
            position = torch.randint(first, length, (batch, 1), generator=generator)
            prompt = torch.cat((prompt, names.gather(1, position)), dim=1)
        return prompt, self.solve(prompt)

    def solve(self, prompt: Tensor) -> Tensor:
        b = prompt.shape[0]
        n = prompt.shape[1] // CLAUSE
        clauses = prompt[:, : CLAUSE * n].unflatten(1, (n, CLAUSE))  # [b, n, 4]
        names, signs, operands = clauses[..., 0], clauses[..., 2], clauses[..., 3]
        clause_of = prompt.new_zeros(b, self.num_names)  # name -> its clause
        index = torch.arange(n, device=prompt.device).expand(b, n)
        clause_of.scatter_(1, names - FIRST_NAME, index)
        # pointer doubling over the chain: node n is the constant 1 (sign +1, its own parent)
        parent = torch.where(
            operands == ONE, n, clause_of.gather(1, (operands - FIRST_NAME).clamp(min=0))
        )
        parent = torch.cat((parent, parent.new_full((b, 1), n)), dim=1)  # [b, n + 1]
        sign = torch.cat((torch.where(signs == MINUS, -1, 1), parent.new_ones(b, 1)), dim=1)
        for _ in range((n - 1).bit_length()):  # 2^k >= n: each path (<= n clauses) is covered
            sign = sign * sign.gather(1, parent)  # the product of the signs of 2^k hops
            parent = parent.gather(1, parent)
        value = sign[:, :n]  # [b, n]: each clause's variable
        if self.query:
            value = value.gather(1, clause_of.gather(1, prompt[:, -1:] - FIRST_NAME))  # [b, 1]
        return torch.where(value == 1, PLUS, MINUS)

    def reference(self, prompt: list[int]) -> list[int]:
        n = len(prompt) // CLAUSE
        clauses = [prompt[i : i + CLAUSE] for i in range(0, CLAUSE * n, CLAUSE)]
        known: dict[int, int] = {ONE: +1}
        while len(known) < n + 1:  # substitute resolved operands until every name is known
            for name, equals, sign, operand in clauses:
                assert equals == EQUALS
                if name not in known and operand in known:
                    known[name] = known[operand] * (-1 if sign == MINUS else +1)
        asked = prompt[-1:] if self.query else [clause[0] for clause in clauses]
        return [PLUS if known[name] == 1 else MINUS for name in asked]
