"""How long the final test (or a re-evaluation) will take, said before it starts, and before
training: greedy decoding of one and of two sequences is timed at up to ``TIMED_LENGTHS``
evaluation lengths (all of them when there are few; else the shortest, the longest and evenly
between, the others interpolated) on the run's device (the weights do not change its cost), and
each length's batches follow from the two (``o + B c``: a call's overhead ``o``, each
sequence's cost ``c``). A test estimated beyond
``LONG_TEST_S`` is warned about, naming the lengths that cost it and what to change; the test
itself logs its progress (``pelab.utils.plain_progress.TestProgress``)."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from pelab.utils.console import duration

log = logging.getLogger(__name__)

LONG_TEST_S = 600.0  # a test estimated longer than this is warned about before training
TIMED_LENGTHS = 6  # at most this many lengths are timed; the others are interpolated


@dataclass(frozen=True)
class TestTime:
    """The estimated seconds of evaluating each length (``by_length``) and in all."""

    by_length: dict[int, float]

    @property
    def total(self) -> float:
        return sum(self.by_length.values())

    def costliest(self) -> list[int]:
        """The lengths that make up most (80%) of the time, longest first."""
        ranked = sorted(self.by_length, key=self.by_length.get, reverse=True)
        kept, spent = [], 0.0
        for length in ranked:
            kept.append(length)
            spent += self.by_length[length]
            if spent >= 0.8 * self.total:
                break
        return kept


def _timed(model, task, length: int, batch: int, device: torch.device) -> float:
    generator = torch.Generator().manual_seed(0)  # the run's own RNG stays untouched
    prompt, answer = task.sample(batch, length, generator)
    prompt, answer = prompt.to(device), answer.to(device)
    synchronize = torch.cuda.synchronize if device.type == "cuda" else lambda *_: None
    synchronize(device)
    start = time.perf_counter()
    model.correct(prompt, answer, length, batch_idx=0, members=[0])
    synchronize(device)
    return time.perf_counter() - start


def estimate(model, task, batch_size: int) -> TestTime:
    """The time of testing every evaluation length of ``task`` with ``task.n_test`` sequences
    per member in batches of ``batch_size`` (members fold into the batch), on the device the
    model is on, from one- and two-sequence decodes timed at each length."""
    device = next(model.parameters()).device
    lengths = sorted(set(task.eval_lengths))
    timed = [lengths[round(i)] for i in np.linspace(0, len(lengths) - 1, TIMED_LENGTHS)]
    timed = sorted(set(timed))  # all of them when there are few; the ends and between else
    training = model.training
    model.eval()  # as in the test: no dropout, so the run's RNG is not drawn from
    try:
        with torch.no_grad():
            _timed(model, task, lengths[0], 1, device)  # caches, first-call costs
            each, overhead = [], []
            for length in timed:
                one, two = (_timed(model, task, length, b, device) for b in (1, 2))
                each.append(max(two - one, 0.0))  # a sequence's share
                overhead.append(max(one - each[-1], 0.0))  # a call's
    finally:
        model.train(training)
    sequences = task.n_test * len(model.seeds)
    batches = math.ceil(sequences / batch_size)
    return TestTime(
        {
            n: batches * float(np.interp(n, timed, overhead))
            + sequences * float(np.interp(n, timed, each))
            for n in task.eval_lengths
        }
    )


def check_test_time(model, task, batch_size: int, what: str = "the final test") -> TestTime:
    """``estimate``, said at INFO level; a warning naming the costly lengths and what to change
    when it exceeds ``LONG_TEST_S``."""
    found = estimate(model, task, batch_size)
    lengths = ", ".join(str(n) for n in task.eval_lengths)
    log.info(
        "%s will take about %s (%d sequences at each of the lengths %s; timed before training)",
        what,
        duration(found.total),
        task.n_test * len(model.seeds),
        lengths,
    )
    if found.total > LONG_TEST_S:
        costly = found.costliest()
        parts = ", ".join(f"length {n}: {duration(found.by_length[n])}" for n in costly)
        log.warning(
            "%s will take about %s, most of it at %s. Drop those lengths from "
            "task.eval_lengths, lower task.n_test (now %d), or train with test=false and "
            "evaluate later (scripts/eval.py)",
            what,
            duration(found.total),
            parts,
            task.n_test,
        )
    return found
