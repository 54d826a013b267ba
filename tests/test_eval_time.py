"""The test's time, said before training (``pelab.eval_time``), and its progress during a long
one (``TestProgress``): issue 45's silent 10 minutes at length 2048."""

import logging
import math

import pytest

from pelab import eval_time
from pelab.assembly import build_members, build_model, build_task
from pelab.eval_time import TestTime, check_test_time
from pelab.members import member_configs
from pelab.train import train
from tests.conftest import TINY, compose_config


def test_the_estimate_covers_every_length_and_grows_with_it(tmp_path):
    cfg = compose_config([*TINY, "task.eval_lengths=[4,256]", "task.n_test=16"], tmp_path)
    model = build_model(cfg, task := build_task(cfg))
    found = eval_time.estimate(model, task, batch_size=8)
    assert list(found.by_length) == [4, 256]
    assert 0 < found.by_length[4] < found.by_length[256]
    assert found.total == pytest.approx(sum(found.by_length.values()))


def test_a_long_test_is_warned_about_naming_the_lengths_that_cost_it(
    tmp_path, monkeypatch, caplog
):
    cfg = compose_config([*TINY, "task.eval_lengths=[4,8,128]"], tmp_path)
    model = build_model(cfg, task := build_task(cfg))
    monkeypatch.setattr(eval_time, "LONG_TEST_S", 0.0)
    with caplog.at_level(logging.INFO, logger="pelab.eval_time"):
        check_test_time(model, task, 8)
    said = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1 and "most of it at length 128: " in said[0].getMessage()
    assert "lower task.n_test (now 8)" in said[0].getMessage()
    assert "the final test will take about" in caplog.text


def test_the_costliest_lengths_make_up_most_of_the_time():
    found = TestTime({4: 1.0, 8: 2.0, 2048: 97.0})
    assert found.costliest() == [2048] and TestTime({4: 1.0, 8: 1.0}).costliest() == [4, 8]


@pytest.mark.integration
def test_a_run_says_its_test_time_before_training_and_its_progress_during_it(tmp_path, caplog):
    overrides = [*TINY, "logger=none", "callbacks.test_progress.every_s=0"]
    with caplog.at_level(logging.INFO):
        train(compose_config(overrides, tmp_path))
    lines = [r.getMessage() for r in caplog.records]
    told = next(i for i, m in enumerate(lines) if m.startswith("the final test will take about"))
    trained = next(i for i, m in enumerate(lines) if "stopped" in m or "step" in m.lower())
    assert told < trained
    assert any(m.startswith("testing length 8 (") and "left at this length" in m for m in lines)


@pytest.mark.parametrize("brief_s", [0.0, eval_time.BRIEF_S])
def test_many_lengths_are_timed_at_a_few_and_interpolated(tmp_path, monkeypatch, brief_s):
    """A preset with hundreds of evaluation lengths (chomsky: 460) times decoding at
    ``TIMED_LENGTHS`` of them, the shortest and the longest among them, not at every one; a
    brief test (this tiny model's, under ``BRIEF_S``) at the shortest and the longest alone."""
    cfg = compose_config([*TINY, "task.eval_lengths=[2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]"],
                         tmp_path)  # fmt: skip
    model = build_model(cfg, task := build_task(cfg))
    timed = []
    original = eval_time._timed
    monkeypatch.setattr(
        eval_time,
        "_timed",
        lambda m, t, n, b, d, **kw: timed.append(n) or original(m, t, n, b, d, **kw),
    )
    monkeypatch.setattr(eval_time, "BRIEF_S", brief_s)
    found = eval_time.estimate(model, task, batch_size=8)
    assert list(found.by_length) == list(range(2, 17))
    assert found.by_length[2] <= found.by_length[9] <= found.by_length[16]
    lengths = sorted(set(timed))
    assert len(lengths) == (eval_time.TIMED_LENGTHS if brief_s == 0 else 2)
    assert lengths[0] == 2 and lengths[-1] == 16


@pytest.mark.parametrize("brief_s", [0.0, math.inf])
@pytest.mark.parametrize("seeds", ["[0]", "[0,1,2]"])
def test_a_stacks_estimate_counts_the_calls_the_test_makes(tmp_path, monkeypatch, seeds, brief_s):
    """Issue 54: a 3-member test was estimated at 23 min for 20 s. The test decodes each batch
    of ``batch_size`` for every member in one call: ``ceil(n_test / batch_size)`` calls per
    length of ``K batch_size`` sequences. With a decode that costs ``o + s c`` for ``s``
    sequences, the estimate is exactly ``calls o + K n_test c`` at each length; so is a brief
    test's from its probes (``n_test`` = ``PROBE`` here: one probe per call)."""
    cfg = compose_config([*TINY, f"seeds={seeds}", "task.eval_lengths=[4,8]"], tmp_path)
    model = build_members(member_configs(cfg), task := build_task(cfg))
    members, overhead, each = len(model.members), 0.5, 0.01
    monkeypatch.setattr(
        eval_time, "_timed", lambda m, t, n, b, d, **_: overhead + n * each * b * len(m.members)
    )
    monkeypatch.setattr(eval_time, "BRIEF_S", brief_s)
    assert task.n_test == eval_time.PROBE
    found = eval_time.estimate(model, task, batch_size=100)
    calls = -(-task.n_test // 100)
    for n in (4, 8):
        expected = calls * overhead + members * task.n_test * n * each
        assert found.by_length[n] == pytest.approx(expected)


def test_a_brief_test_is_estimated_from_three_decodes(tmp_path, monkeypatch):
    """A brief test (this tiny model's) is not worth timing a decode twice: one warm-up, one
    try at the longest length and one at the shortest, each decoding once; a test that is not
    brief times its longest probe again (``RETRY_S``) and every length between."""
    cfg = compose_config([*TINY, "task.eval_lengths=[4,8,16]"], tmp_path)
    model = build_model(cfg, task := build_task(cfg))
    decoded = []
    original = type(model).correct
    monkeypatch.setattr(
        type(model),
        "correct",
        lambda m, p, *a, **kw: decoded.append(p.shape) or original(m, p, *a, **kw),
    )
    monkeypatch.setattr(eval_time, "RETRY_S", math.inf)  # every timed call short
    eval_time.estimate(model, task, batch_size=8)
    assert [shape[0] for shape in decoded] == [1, eval_time.PROBE, eval_time.PROBE]
    decoded.clear()
    monkeypatch.setattr(eval_time, "BRIEF_S", 0.0)
    eval_time.estimate(model, task, batch_size=8)
    # a warm-up, the longest probe and its second timing (twice), then one sequence at each of
    # the 3 lengths and a probe at the 2 others, each timed twice
    assert len(decoded) == 1 + 1 + 2 + 3 * 2 + 2 * 2
