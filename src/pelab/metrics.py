"""Metrics, in one home: their names, the key format of the loggers, per-length scores, and the
in- and out-of-distribution means.

Scores travel as data, never through strings: a split's scores are ``Scores``,
``{length: {metric: value}}``; ``summary`` turns the test (and validation) scores and the chance
levels into the ``metrics`` section of ``results.json``; ``logged_values`` formats the flat keys
that the loggers (W&B, CSV, the progress bar) show, and nothing parses them back.

Metrics (``METRICS``), for every evaluation length ``L``:

- ``exact_match``: the whole greedy answer is right;
- ``token_acc``: the share of greedy answer tokens that are right, position by position;
- validation only (``VALIDATION_METRICS``): ``exact_match`` from one teacher-forced pass (equal
  to greedy decoding's) and ``next_token_acc``, the share of answer tokens predicted right from
  the true prefix (teacher forcing; an encoder's one pass is its prediction, so there it equals
  ``token_acc``).

Chance levels are computed in ``pelab.chance`` (torch and the evaluation sets); this module
imports neither, so reading results (``scripts/make_table.py``) starts without them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

METRICS = ("exact_match", "token_acc")
# validation scores one teacher-forced pass (issue 53): its exact match is greedy decoding's
# (an answer is all right iff every teacher-forced argmax is right); its token accuracy is not,
# so it has its own name: ``next_token_acc``, the share of answer tokens whose prediction from the
# true prefix is right
VALIDATION_METRICS = ("exact_match", "next_token_acc")
SPLIT_METRICS = {"val": VALIDATION_METRICS, "test": METRICS}
GROUPS = ("id", "ood")  # lengths inside / outside the training range
Scores = dict[int, dict[str, float]]  # {length: {metric: value}}


def length_key(split: str, metric: str, length: int) -> str:
    """The logger key of one metric at one length: ``test/exact_match/len_16``."""
    return f"{split}/{metric}/len_{length}"


def mean_key(split: str, group: str, metric: str) -> str:
    """The logger key of a mean over a group of lengths: ``test/id/exact_match``."""
    return f"{split}/{group}/{metric}"


def group_means(scores: Scores, in_distribution: Callable[[int], bool]) -> dict[str, dict]:
    """``{"id": {metric: mean}, "ood": {...}}``: each metric averaged over the lengths inside
    (``id``) and outside (``ood``) the training range; a group without lengths is left out."""
    means = {}
    for group in GROUPS:
        chosen = [v for n, v in scores.items() if in_distribution(n) == (group == "id")]
        if chosen:
            means[group] = {m: sum(v[m] for v in chosen) / len(chosen) for m in chosen[0]}
    return means


def logged_values(
    split: str, scores: Scores, in_distribution: Callable[[int], bool]
) -> dict[str, float]:
    """The flat values the loggers get: every metric per length and the group means."""
    values = {
        length_key(split, metric, length): value
        for length, per_metric in scores.items()
        for metric, value in per_metric.items()
    }
    for group, means in group_means(scores, in_distribution).items():
        values |= {mean_key(split, group, metric): v for metric, v in means.items()}
    return values


# the score that picks a run's best checkpoint (``best.ckpt``), logged at every validation
SELECTION_KEY = "val/id/selection"


def selection_score(
    scores: Scores, in_distribution: Callable[[int], bool], samples_per_length: int
) -> float:
    """What picks a run's best checkpoint: the in-distribution exact match, ties broken by the
    in-distribution next-token accuracy of the same pass (so that among validations with equal
    exact match, e.g. 0 everywhere early on, the better model wins, not the first; scores of a
    checkpoint from before issue 53 break ties by their greedy ``token_acc``). The exact match
    over ``L`` lengths of ``n`` samples is a multiple of ``1/(nL)``; the tie-breaker enters
    scaled by ``1/(10nL)``, below that step, so the order is lexicographic:
    ``EM + next_token_acc / (10 n L)``."""
    means = group_means(scores, in_distribution)["id"]
    lengths = sum(1 for n in scores if in_distribution(n))
    ties = means.get("next_token_acc", means.get("token_acc", 0.0))
    return means["exact_match"] + ties / (10 * samples_per_length * lengths)


def as_json(scores: Scores) -> dict[str, dict[str, float]]:
    """Scores with string length keys, in increasing length (how ``results.json`` holds them)."""
    return {str(length): dict(scores[length]) for length in sorted(scores)}


def summary(
    scores: dict[str, Scores],
    in_distribution: Callable[[int], bool],
    chance: Scores | None = None,
) -> dict[str, Any]:
    """The ``metrics`` section of ``results.json``: ``test`` per length with its means
    ``test_id`` and ``test_ood``; ``val`` per length (the last validation, when there was one);
    ``chance`` per length with ``chance_id`` and ``chance_ood`` (when given)."""
    test = scores.get("test", {})
    means = group_means(test, in_distribution)
    section: dict[str, Any] = {
        "test": as_json(test),
        "test_id": means.get("id", {}),
        "test_ood": means.get("ood", {}),
    }
    if scores.get("val"):
        section["val"] = as_json(scores["val"])
    if chance is not None:
        section["chance"] = as_json(chance)
        section |= {
            f"chance_{group}": v for group, v in group_means(chance, in_distribution).items()
        }
    return section
