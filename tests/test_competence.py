"""Competence budgets: training stops once the task is learned in distribution."""

import json
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch

from pelab.competence import LearnedStop, validation_lengths
from pelab.errors import ConfigError
from pelab.member_state import MemberState
from pelab.tasks import TASK_REGISTRY
from pelab.train import train

# copy of 1-2 symbols out of 4: a 1-layer model learns it in ~100-150 steps
EASY = [
    "task.train_lengths=[1,2]",
    "task.eval_lengths=[1,2,6]",
    "task.num_symbols=4",
    "task.n_val=32",
    "model.net.d_model=32",
    "trainer.max_steps=600",
    "trainer.val_check_interval=25",
]


def trained_steps(cfg) -> int:
    last = Path(cfg.paths.output_dir, "checkpoints", "last.ckpt")
    return torch.load(last, map_location="cpu", weights_only=False)["global_step"]


@pytest.mark.integration
def test_a_run_stops_once_learned_and_records_when(tiny_cfg):
    cfg = tiny_cfg(*EASY, "learned_at=0.9")
    [record] = train(cfg)
    assert record["status"] == "completed" and record["stop_reason"] == "learned"
    assert record["attention"] == {"kernel": "flash (cpu)", "dtype": "float32"}  # pelab.kernels
    assert record["learned"] is True and record["steps_to_learn"] % 25 == 0
    # patience 2: the criterion held at steps_to_learn and at the next validation, then it stopped
    assert trained_steps(cfg) == record["steps_to_learn"] + 25 < 600
    assert list(record["metrics"]["val"]) == ["1", "2"]  # validation: in-distribution only
    assert list(record["metrics"]["test"]) == ["1", "2", "6"]  # the test: every length
    assert min(record["metrics"]["val"][n]["exact_match"] for n in ("1", "2")) >= 0.9
    # re-running the finished run resumes from last.ckpt, which knows it learned: no training
    [again] = train(tiny_cfg(*EASY, "learned_at=0.9"))
    assert again["steps_to_learn"] == record["steps_to_learn"] and trained_steps(cfg) < 600
    assert again["metrics"]["test"] == record["metrics"]["test"]


@pytest.mark.integration
def test_a_run_that_never_meets_the_criterion_trains_to_the_cap(tiny_cfg):
    [record] = train(tiny_cfg(*EASY, "trainer.max_steps=50", "learned_at=1.0"))
    assert (record["learned"], record["steps_to_learn"]) == (False, None)
    assert record["stop_reason"] == "max_steps"


@pytest.mark.integration
def test_without_a_criterion_every_length_is_validated_and_nothing_is_judged(tiny_cfg):
    [record] = train(tiny_cfg(*EASY, "trainer.max_steps=50", "learned_at=null"))
    assert (record["learned"], record["steps_to_learn"], record["stop_reason"]) == (
        None,
        None,
        "max_steps",
    )
    assert list(record["metrics"]["val"]) == ["1", "2", "6"]


@pytest.mark.integration
def test_a_failed_run_records_why_it_stopped(tiny_cfg, monkeypatch):
    def broken_fit(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(L.Trainer, "fit", broken_fit)
    cfg = tiny_cfg("learned_at=0.9")
    with pytest.raises(RuntimeError, match="boom"):
        train(cfg)
    saved = json.loads(Path(cfg.paths.output_dir, "results.json").read_text())
    assert saved["status"] == "failed" and saved["stop_reason"] == "failed"


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("learned_at=1.5", r"learned_at=1.5 is not an exact-match threshold in \(0, 1\]"),
        ("learned_at=0", r"learned_at=0 is not an exact-match threshold"),
        ("learned_patience=0", r"learned_patience=0 is out of range: it must be >= 1"),
        ("learned_at=high", r"learned_at='high' has the wrong type"),
    ],
)
def test_a_criterion_no_run_can_use_is_refused_before_training(tiny_cfg, override, match):
    with pytest.raises(ConfigError, match=match):
        train(tiny_cfg(override))


def test_validation_lengths_are_the_in_distribution_ones_under_a_budget():
    task = TASK_REGISTRY["copy"](train_lengths=[1, 8], eval_lengths=[4, 8, 16, 32])
    assert validation_lengths(task, None) == [4, 8, 16, 32]
    assert validation_lengths(task, 0.99) == [4, 8]


class Members:
    """What ``LearnedStop`` reads of a ``SequenceModel`` (each member's validation scores) and
    calls (``stop_member``)."""

    def __init__(self, *scores: dict) -> None:
        self.task = TASK_REGISTRY["copy"](train_lengths=[1, 8], eval_lengths=[4, 8])
        self.members = [MemberState(k, scores={"val": s}) for k, s in enumerate(scores)]

    def stop_member(self, k: int) -> None:
        self.members[k].stopped = True

    @property
    def stopped(self) -> list[bool]:
        return [m.stopped for m in self.members]

    @property
    def active(self) -> list[int]:
        return [k for k, m in enumerate(self.members) if not m.stopped]


def fake(step: int, *scores: dict) -> tuple[SimpleNamespace, Members]:
    trainer = SimpleNamespace(sanity_checking=False, global_step=step, should_stop=False)
    return trainer, Members(*scores)


def test_the_criterion_is_the_worst_length_at_consecutive_validations():
    stop = LearnedStop(0.99, patience=2)
    # (step, exact match at 4, at 8): the mean reaches 0.99 at 100, the worst length only at 200
    history = [(100, 1.0, 0.98), (200, 1.0, 0.99), (300, 0.5, 1.0), (400, 0.99, 1.0)]
    history += [(500, 1.0, 1.0)]
    stopped = []
    for step, a, b in history:
        trainer, module = fake(step, {4: {"exact_match": a}, 8: {"exact_match": b}})
        stop.on_validation_end(trainer, module)
        stopped.append(trainer.should_stop)
    assert stopped == [False, False, False, False, True]
    assert stop.fields() == {"learned": True, "steps_to_learn": 400, "stop_reason": "learned"}


def test_the_streak_is_saved_and_a_learned_run_stops_when_resumed():
    stop = LearnedStop(0.9, patience=3)
    trainer, module = fake(100, {4: {"exact_match": 1.0}, 8: {"exact_match": 1.0}})
    stop.on_validation_end(trainer, module)
    resumed = LearnedStop(0.9, patience=3)
    resumed.load_state_dict(stop.state_dict())
    assert (resumed.competence[0].streak, resumed.competence[0].streak_start) == (1, 100)
    resumed.competence[0].steps_to_learn = 100
    trainer = SimpleNamespace(should_stop=False)
    resumed.on_train_start(trainer, module)
    assert trainer.should_stop


def test_each_member_stops_on_its_own_and_training_when_all_have():
    stop = LearnedStop(0.9, patience=1, members=2)
    good, bad = (
        {4: {"exact_match": 1.0}, 8: {"exact_match": 1.0}},
        {4: {"exact_match": 0.1}, 8: {"exact_match": 0.1}},
    )
    trainer, module = fake(100, good, bad)
    stop.on_validation_end(trainer, module)
    assert module.stopped == [True, False] and not trainer.should_stop
    module.members[1].scores["val"] = good
    trainer.global_step = 200
    stop.on_validation_end(trainer, module)
    assert module.stopped == [True, True] and trainer.should_stop
    assert [stop.fields(k)["steps_to_learn"] for k in (0, 1)] == [100, 200]
    assert stop.member_state(1) == {"members": [stop.competence[1].state_dict()]}
