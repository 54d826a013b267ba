"""Chance levels (pelab.chance): a hand-computed cross-fit, and agreement with exact values."""

import pytest
import torch

from pelab.chance import chance_levels, constant_answers, eval_chance
from pelab.data.eval_sets import load_eval_set
from pelab.metrics import (
    group_means,
    logged_values,
    selection_score,
    summary,
)
from pelab.tasks import TASK_REGISTRY


def test_hand_computed_cross_fit():
    answers = torch.tensor([[3, 4], [3, 4], [3, 5], [4, 4]])
    # fit on rows 0-1: whole [3, 4], per position [3, 4]; on rows 2-3: 0 exact, 1 + 1 half tokens
    # fit on rows 2-3: whole [3, 5] (a tie, the smallest row), per position [3, 4] (ties ->
    # smallest token); on rows 0-1: 0 exact, 2 full tokens
    assert chance_levels(answers) == {"exact_match": 0.0, "token_acc": (1 + 2) / 4}


def test_ties_go_to_the_smallest_answer():
    whole, per_position = constant_answers(torch.tensor([[9, 3], [4, 8], [9, 3], [4, 8]]))
    assert whole.tolist() == [4, 8] and per_position.tolist() == [4, 3]


def test_a_constant_answer_is_always_right():
    assert chance_levels(torch.full((10, 3), 7)) == {"exact_match": 1.0, "token_acc": 1.0}
    assert chance_levels(torch.tensor([[5, 6]])) == {"exact_match": 1.0, "token_acc": 1.0}


def summation_best_constant(terms: int) -> float:
    """The probability of the most likely sum mod 10 of ``terms`` digits uniform on 1..9."""
    dist = torch.zeros(10, dtype=torch.float64)
    dist[0] = 1.0
    for _ in range(terms):
        dist = sum(torch.roll(dist, d) for d in range(1, 10)) / 9
    return float(dist.max())


@pytest.mark.parametrize("terms", [1, 2, 3])
def test_summation_chance_matches_the_exact_distribution(terms):
    task = TASK_REGISTRY["summation"]()
    _, answer = task.sample(20000, terms, torch.Generator().manual_seed(terms))
    chance = chance_levels(answer)
    assert chance["exact_match"] == pytest.approx(summation_best_constant(terms), abs=0.01)
    assert chance["token_acc"] == chance["exact_match"]  # a one-token answer


def test_copy_chance_is_one_symbol_in_32_per_token_and_zero_for_the_whole_answer():
    task = TASK_REGISTRY["copy"]()
    _, answer = task.sample(4000, 8, torch.Generator().manual_seed(0))
    chance = chance_levels(answer)
    assert chance["exact_match"] == 0.0  # 32^8 answers: a constant one is never right
    assert chance["token_acc"] == pytest.approx(1 / 32, abs=0.006)


def test_binary_answers_have_one_half_chance():
    task = TASK_REGISTRY["odds_first"]()  # at length 1 the answer is the one random bit
    _, answer = task.sample(20000, 1, torch.Generator().manual_seed(0))
    assert chance_levels(answer)["exact_match"] == pytest.approx(0.5, abs=0.01)


def test_eval_chance_scores_the_cached_test_sets(tmp_path):
    task = TASK_REGISTRY["bucket_sort"](eval_lengths=[1, 16])
    chance = eval_chance(task, "test", 512, tmp_path)
    assert list(chance) == [1, 16]
    answers = load_eval_set(task, "test", 16, 512, tmp_path)[:]["answer"]
    assert chance[16] == chance_levels(answers)
    assert chance[1]["exact_match"] == pytest.approx(1 / 5, abs=0.06)  # 5 symbols
    # sorted answers: the first slot is mostly the smallest symbol, the last the largest
    assert chance[16]["token_acc"] > 0.5 > chance[16]["exact_match"]


def test_chance_means_average_the_lengths_inside_and_outside_the_training_range():
    task = TASK_REGISTRY["copy"](train_lengths=[1, 8], eval_lengths=[4, 8, 16])
    per_length = {
        4: {"exact_match": 0.2, "token_acc": 0.4},
        8: {"exact_match": 0.0, "token_acc": 0.2},
        16: {"exact_match": 0.1, "token_acc": 0.3},
    }
    means = group_means(per_length, task.in_distribution)
    assert means["id"] == pytest.approx({"exact_match": 0.1, "token_acc": 0.3})
    assert means["ood"] == per_length[16]
    assert "ood" not in group_means({4: per_length[4]}, task.in_distribution)


def test_logged_values_and_the_summary_come_from_the_same_scores():
    task = TASK_REGISTRY["copy"](train_lengths=[1, 8], eval_lengths=[4, 16])
    scores = {
        16: {"exact_match": 0.0, "token_acc": 0.5},
        4: {"exact_match": 1.0, "token_acc": 1.0},
    }
    assert logged_values("val", scores, task.in_distribution) == {
        "val/exact_match/len_16": 0.0,
        "val/token_acc/len_16": 0.5,
        "val/exact_match/len_4": 1.0,
        "val/token_acc/len_4": 1.0,
        "val/id/exact_match": 1.0,
        "val/id/token_acc": 1.0,
        "val/ood/exact_match": 0.0,
        "val/ood/token_acc": 0.5,
    }
    chance = {
        4: {"exact_match": 0.1, "token_acc": 0.2},
        16: {"exact_match": 0.0, "token_acc": 0.1},
    }
    section = summary({"test": scores}, task.in_distribution, chance)
    assert list(section["test"]) == ["4", "16"]  # JSON keys, in increasing length
    assert section["test"]["16"] == scores[16] and "val" not in section
    assert section["test_id"] == scores[4] and section["test_ood"] == scores[16]
    assert section["chance"]["4"] == chance[4]
    assert section["chance_id"] == chance[4] and section["chance_ood"] == chance[16]


def test_the_best_checkpoint_is_chosen_by_exact_match_then_token_accuracy():
    """Equal exact match (0 everywhere, early on): the better token accuracy wins, so the later,
    better model is tested; one more exact answer beats any token accuracy."""
    n, inside = 4, lambda length: length <= 8  # 4 samples per length, lengths 4 and 8 inside

    def score(em4, em8, tok4, tok8):
        scores = {
            4: {"exact_match": em4, "token_acc": tok4},
            8: {"exact_match": em8, "token_acc": tok8},
        }
        return selection_score(scores | {16: {"exact_match": 1.0, "token_acc": 1.0}}, inside, n)

    early, later = score(0, 0, 0.2, 0.1), score(0, 0, 0.6, 0.3)
    assert later > early
    assert score(0.25, 0, 0.0, 0.0) > score(0, 0, 1.0, 1.0)  # one exact answer in 8 more
    assert score(1.0, 0.75, 1.0, 0.9) > score(1.0, 0.5, 1.0, 1.0)
    assert score(0.5, 0.5, 0.7, 0.7) == pytest.approx(0.5 + 0.7 / (10 * n * 2))


def test_each_members_best_checkpoint_follows_the_selection_score(tmp_path, monkeypatch):
    """``BestCheckpoints`` saves member ``k`` when its ``selection_score`` beats its best so
    far (ties keep the earlier), each member on its own."""
    from types import SimpleNamespace

    from pelab.member_state import MemberState
    from pelab.reliability.resume.callbacks import BestCheckpoints

    task = TASK_REGISTRY["copy"](train_lengths=[1, 4], eval_lengths=[4, 8])
    best = BestCheckpoints([tmp_path / "a.ckpt", tmp_path / "b.ckpt"], [{}, {}])
    saved = []
    monkeypatch.setattr(best, "save", lambda trainer, module, k: saved.append((trainer.step, k)))
    module = SimpleNamespace(task=task, validated=[0, 1], members=[MemberState(0), MemberState(1)])

    def scores(em, tok):
        return {4: {"exact_match": em, "token_acc": tok}, 8: {"exact_match": 0.0, "token_acc": 0}}

    validations = [((0, 0.2), (0, 0.5)), ((0, 0.6), (0, 0.5)), ((0.5, 0), (0, 0.4))]
    for step, (a, b) in enumerate(validations):
        module.members[0].scores["val"], module.members[1].scores["val"] = scores(*a), scores(*b)
        best.on_validation_end(SimpleNamespace(sanity_checking=False, step=step), module)
    assert saved == [(0, 0), (0, 1), (1, 0), (2, 0)]
    assert best.best[0] == selection_score(scores(0.5, 0), task.in_distribution, task.n_val)
