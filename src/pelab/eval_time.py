"""How long the final test (or a re-evaluation) will take, said before it starts, and before
training: greedy decoding is timed as the test runs it (every member of a stack folded into one
call) on one and on ``PROBE`` sequences per member (a call under ``RETRY_S`` is tried twice, the
faster counts: jitter would otherwise dominate it), at up to
``TIMED_LENGTHS`` evaluation lengths (all of them when there are few; else the shortest, the
longest and evenly between, the others interpolated), on the run's device (the weights do not
change its cost). Each length's calls follow from the two (``o + s c``: a call's overhead ``o``,
each sequence's cost ``c``, ``s`` sequences in the call). A brief test is not worth that: when
one try of the probe at the longest length bounds the whole test below ``BRIEF_S`` (no call of
the test costs more than ``ceil(batch / PROBE)`` such probes; jitter only lengthens a try), one
try at the shortest length and that one alone give it, interpolated between them (an upper
estimate): three decodes in all, the first a warm-up, which is never timed twice. A test
estimated beyond ``LONG_TEST_S`` is warned about, naming the lengths that cost it and what to
change; the test itself logs its progress (``pelab.utils.plain_progress.TestProgress``)."""

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
PROBE = 8  # sequences per member in the larger timed call (the smaller: one)
RETRY_S = 0.25  # a timed call shorter than this is timed again, the faster counts
BRIEF_S = 10.0  # a test bounded below this is estimated from its shortest and longest lengths


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


def _timed(
    model, task, length: int, batch: int, device: torch.device, retry: bool = True
) -> float:
    """Seconds of greedily decoding ``batch`` sequences at ``length`` for every member at once,
    as the test calls it; with ``retry``, the faster of two tries when the first is short
    (``RETRY_S``)."""
    generator = torch.Generator().manual_seed(0)  # the run's own RNG stays untouched
    prompt, answer = task.sample(batch, length, generator)
    prompt, answer = prompt.to(device), answer.to(device)
    members = list(range(len(model.members)))
    synchronize = torch.cuda.synchronize if device.type == "cuda" else lambda *_: None
    tries: list[float] = []
    while not tries or (retry and len(tries) < 2 and tries[0] < RETRY_S):
        synchronize(device)
        start = time.perf_counter()
        model.correct(prompt, answer, length, batch_idx=0, members=members)
        synchronize(device)
        tries.append(time.perf_counter() - start)
    return min(tries)


def estimate(model, task, batch_size: int) -> TestTime:
    """The time of testing every evaluation length of ``task``: ``ceil(n_test / batch_size)``
    calls per length, each decoding its batch for every member at once (``task.n_test``
    sequences per member in all), on the device the model is on, from decodes of one and of
    ``PROBE`` sequences per member timed at each length (a brief test: of ``PROBE`` at its
    shortest and longest lengths)."""
    device = next(model.parameters()).device
    lengths = sorted(set(task.eval_lengths))
    timed = [lengths[round(i)] for i in np.linspace(0, len(lengths) - 1, TIMED_LENGTHS)]
    timed = sorted(set(timed))  # all of them when there are few; the ends and between else
    members = len(model.members)
    calls = math.ceil(task.n_test / batch_size)
    probes_per_call = math.ceil(min(batch_size, task.n_test) / PROBE)
    training = model.training
    model.eval()  # as in the test: no dropout, so the run's RNG is not drawn from
    try:
        with torch.no_grad():
            _timed(model, task, lengths[0], 1, device, retry=False)  # caches, first-call costs
            longest = _timed(model, task, lengths[-1], PROBE, device, retry=False)
            if len(lengths) * calls * probes_per_call * longest < BRIEF_S:
                probes = {lengths[-1]: longest}  # the ends: the shortest, then the longest
                if lengths[0] != lengths[-1]:
                    shortest = _timed(model, task, lengths[0], PROBE, device, retry=False)
                    probes = {lengths[0]: shortest, **probes}
                ends, per_call = list(probes), [probes_per_call * t for t in probes.values()]
                return TestTime(
                    {n: calls * float(np.interp(n, ends, per_call)) for n in task.eval_lengths}
                )
            longest = min(longest, _timed(model, task, lengths[-1], PROBE, device))
            each, overhead = [], []
            for length in timed:
                one = _timed(model, task, length, 1, device)
                probe = (
                    longest
                    if length == lengths[-1]
                    else _timed(model, task, length, PROBE, device)
                )
                each.append(max(probe - one, 0.0) / ((PROBE - 1) * members))  # a sequence's
                overhead.append(max(one - members * each[-1], 0.0))  # a call's
    finally:
        model.train(training)
    sequences = task.n_test * members
    return TestTime(
        {
            n: calls * float(np.interp(n, timed, overhead))
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
        task.n_test * len(model.members),
        lengths,
    )
    if found.total > LONG_TEST_S:
        costly = found.costliest()
        parts = ", ".join(f"length {n}: {duration(found.by_length[n])}" for n in costly)
        log.warning(
            "%s will take about %s, most of it at %s. Drop those lengths from "
            "task.eval_lengths, lower task.n_test (now %d), or train with test=false and "
            "evaluate later (scripts/eval.py); each changes the run's protocol, so a baseline "
            "recorded with the old values refuses to be compared with it "
            "(make_table.py --baseline)",
            what,
            duration(found.total),
            parts,
            task.n_test,
        )
    return found
