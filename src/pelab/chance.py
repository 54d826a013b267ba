"""Chance levels: the score of the best *input-independent* predictor, one that gives the same
answer to every prompt of a length (exact match: the most frequent whole answer; token accuracy:
the most frequent token at each answer position). Fitted and scored on the same samples such a
predictor is overrated (among ``n`` distinct answers the "most frequent" one is right ``1/n`` of
the time although a constant answer is almost never right), so it is *cross-fitted*: fitted on
one half of the set and scored on the other, both ways round. It is computed from the very set
the model is scored on, so it needs no per-task formula and covers every task, a user's dataset
included.

Apart from ``pelab.metrics`` (the names and means), because it needs torch and the cached
evaluation sets (``datasets``), which reading results does not.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from pelab.data.eval_sets import load_eval_set
from pelab.metrics import Scores
from pelab.tasks.base import Task


def constant_answers(answers: Tensor) -> tuple[Tensor, Tensor]:
    """The most frequent whole answer ``[m]`` and the most frequent token per position ``[m]``
    of ``answers: [n, m]`` (ties go to the smallest, so the result is deterministic)."""
    rows, counts = answers.unique(dim=0, return_counts=True)  # rows sorted: ties -> smallest
    whole = rows[counts.argmax()]
    columns = answers.T  # [m, n]
    counts = torch.zeros(
        columns.shape[0], int(answers.max()) + 1, dtype=torch.long, device=answers.device
    )
    counts.scatter_add_(1, columns, torch.ones_like(columns))  # [m, V]: count of each token
    return whole, counts.argmax(dim=-1)


def chance_levels(answers: Tensor) -> dict[str, float]:
    """Cross-fitted chance levels of exact match and token accuracy on ``answers: [n, m]``."""
    n = answers.shape[0]
    folds = (
        [(answers, answers)]
        if n < 2
        else [
            (answers[: n // 2], answers[n // 2 :]),
            (answers[n // 2 :], answers[: n // 2]),
        ]
    )
    exact = tokens = 0.0
    for fit, score in folds:
        whole, per_position = constant_answers(fit)
        exact += float((score == whole).all(dim=-1).sum())
        tokens += float((score == per_position).float().mean(dim=-1).sum())
    total = sum(score.shape[0] for _, score in folds)
    return {"exact_match": exact / total, "token_acc": tokens / total}


def eval_chance(task: Task, split: str, n: int, cache_dir: str | Path | None) -> Scores:
    """The chance levels on the (cached) ``split`` sets of ``task``, per evaluation length."""
    return {
        length: chance_levels(load_eval_set(task, split, length, n, cache_dir)[:]["answer"])
        for length in task.eval_lengths
    }
