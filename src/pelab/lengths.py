"""Evaluation lengths as a config writes them (``[5, 10, "11..40"]``), outside ``pelab.tasks``
(whose package imports every task, and torch) so that reading results needs no task."""

from __future__ import annotations

from collections.abc import Sequence

from pelab.errors import ConfigError


def expand_lengths(lengths: Sequence[int | str]) -> list[int]:
    """``task.eval_lengths`` as integers: each item is a length or an inclusive range ``"a..b"``
    (``[5, 10, "11..40"]`` -> 5, 10, 11, 12, ..., 40: every length of a range, as the score of
    Deletang et al. 2023 averages over every unseen length)."""
    expanded = []
    for item in lengths:
        if isinstance(item, str):
            low, dots, high = item.partition("..")
            if not (dots and low.strip().isdigit() and high.strip().isdigit()):
                raise ConfigError(
                    f"task.eval_lengths: {item!r} is neither a length nor a range 'a..b' "
                    "(e.g. [5, 10, 11..40])"
                )
            if int(low) > int(high):
                raise ConfigError(f"task.eval_lengths: the range {item!r} is empty (a > b)")
            expanded.extend(range(int(low), int(high) + 1))
        else:
            expanded.append(int(item))
    return expanded


def no_extrapolation_note(train_lengths: Sequence[int], eval_lengths: Sequence[int]) -> str | None:
    """A note when no evaluation length lies beyond training (``task.train_lengths=[1,80]``
    for ``[1,8]``: nothing out of distribution is tested, and the tables' OOD columns stay
    empty); None otherwise."""
    if any(length > train_lengths[1] for length in eval_lengths):
        return None
    return (
        f"no evaluation length lies beyond training (task.train_lengths={list(train_lengths)}, "
        f"task.eval_lengths={list(eval_lengths)}): nothing out of distribution is tested; "
        "add longer task.eval_lengths to measure length generalization"
    )
