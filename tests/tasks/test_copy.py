"""Copy and its variants (random, repeated, double, double_next): hand-written answers,
properties, runs."""

import pytest
import torch

from pelab.data.eval_sets import cache_key
from pelab.errors import ConfigError
from pelab.tasks.copy import CopyTask
from tests.tasks.run_check import learn

PROMPT = [5, 3, 4, 3]


@pytest.mark.parametrize(
    ("variant", "answer"),
    [
        ("random", [5, 3, 4, 3]),
        ("repeated", [5, 3, 4, 3, 3 + 32]),  # the end marker: the token after the 32 symbols
        ("double", [5, 3, 4, 3, 5, 3, 4, 3]),
        ("double_next", [5, 3, 4, 3, 3 + 32, 5, 3, 4, 3]),  # NEXT: the token after the symbols
    ],
)
def test_hand_written_answers(variant, answer):
    task = CopyTask(variant=variant)
    assert task.reference(PROMPT) == answer
    assert task.solve(torch.tensor([PROMPT])).tolist() == [answer]
    assert task.answer_length(4) == len(answer)


def test_repeated_prompts_hold_one_symbol_and_all_symbols_occur():
    task = CopyTask(variant="repeated", num_symbols=6)
    prompt, answer = task.sample(300, 9, torch.Generator().manual_seed(0))
    assert (prompt == prompt[:, :1]).all() and torch.equal(answer[:, :9], prompt)
    assert sorted(prompt[:, 0].unique().tolist()) == list(range(3, 9))


def test_repeated_answers_end_with_a_marker_no_prompt_holds():
    """Counting: the answer is the symbol ``length`` times, then END (token 3 + num_symbols,
    inside the vocabulary and never in a prompt), so stopping early or late is wrong."""
    task = CopyTask(variant="repeated", num_symbols=6)
    prompt, answer = task.sample(300, 5, torch.Generator().manual_seed(0))
    assert answer.shape == (300, 6) and (answer[:, 5] == 9).all()
    assert task.vocab_size == 3 + 6 + 1 and int(prompt.max()) < 9
    assert CopyTask(num_symbols=6).vocab_size == 3 + 6  # random and double: no marker
    assert CopyTask(num_symbols=6, variant="double_next").vocab_size == 3 + 6 + 1  # NEXT


@pytest.mark.parametrize("variant", ["random", "repeated", "double", "double_next"])
def test_no_prompt_holds_the_marker(variant):
    task = CopyTask(variant=variant, num_symbols=4)
    prompt, _ = task.sample(500, 8, torch.Generator().manual_seed(0))
    assert int(prompt.max()) < task.end  # END / NEXT only ever in answers
    assert set(prompt.unique().tolist()) == {3, 4, 5, 6}


def test_random_prompts_are_uniform_over_symbols():
    prompt, _ = CopyTask(num_symbols=4).sample(5000, 8, torch.Generator().manual_seed(0))
    shares = torch.bincount(prompt.flatten() - 3, minlength=4) / prompt.numel()
    assert torch.allclose(shares, torch.full((4,), 0.25), atol=0.01)


def test_variants_have_their_own_evaluation_sets():
    keys = {
        cache_key(CopyTask(variant=v), "test", 8, 16)
        for v in ("random", "repeated", "double", "double_next")
    }
    assert len(keys) == 4


def test_an_unknown_variant_is_refused_with_the_choices():
    with pytest.raises(ConfigError, match=r"'twice'.*random, repeated, double"):
        CopyTask(variant="twice")


@pytest.mark.slow
def test_a_small_model_learns_to_count_in_distribution(tmp_path):
    """``repeated``: END exactly after ``length`` symbols; measured 100% exact match (seeds 0
    and 1) in 1000 steps at up to 8 tokens."""
    lengths = ("task.train_lengths=[1,8]", "task.eval_lengths=[8]")
    record = learn(tmp_path, "copy", 1000, "task.variant=repeated", *lengths)
    assert record["metrics"]["test_id"]["exact_match"] >= 0.9


@pytest.mark.slow
def test_a_small_model_learns_copy_in_distribution(tmp_path):
    record = learn(tmp_path, "copy", 2000, "task.train_lengths=[1,8]", "task.eval_lengths=[8]")
    assert record["metrics"]["test_id"]["exact_match"] >= 0.9
