"""Sort (single symbols and multi-digit numbers): hand-written answers, properties, runs."""

import pytest
import torch

from pelab.errors import ConfigError
from pelab.tasks.sort import SortTask
from tests.tasks.run_check import learn


def digits(text: str) -> list[int]:
    return [3 + int(c) for c in text.replace(" ", "")]


def test_single_symbols_sort_by_token_id_keeping_duplicates():
    task = SortTask()
    assert task.reference([5, 3, 4, 3]) == [3, 3, 4, 5]
    assert task.solve(torch.tensor([[5, 3, 4, 3]])).tolist() == [[3, 3, 4, 5]]


@pytest.mark.parametrize(
    ("d", "prompt", "answer"),
    [
        (2, "42 07 15", "07 15 42"),
        (3, "100 099 100 000", "000 099 100 100"),
        (1, "3 1 2", "1 2 3"),
        (4, "9999", "9999"),
    ],
)
def test_multi_digit_numbers_sort_by_value(d, prompt, answer):
    task = SortTask(digits=d)
    assert task.reference(digits(prompt)) == digits(answer)
    assert task.solve(torch.tensor([digits(prompt)])).tolist() == [digits(answer)]


def test_multi_digit_answers_are_sorted_numbers_from_the_prompt():
    task = SortTask(digits=4)
    assert task.vocab_size == 3 + 10 and task.prompt_length(6) == task.answer_length(6) == 24
    prompt, answer = task.sample(64, 6, torch.Generator().manual_seed(0))
    powers = torch.tensor([1000, 100, 10, 1])
    values = [((t - 3).view(64, 6, 4) * powers).sum(-1) for t in (prompt, answer)]
    assert torch.equal(values[0].sort(dim=1).values, values[1])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"digits": 0}, r"task.digits must be null or in \[1, 18\], got 0"),
        ({"digits": 19}, r"got 19"),
        ({"digits": 2, "num_symbols": 5}, r"10 digits.*got 5"),
    ],
)
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        SortTask(**kwargs)


@pytest.mark.slow
def test_a_small_model_learns_sort_in_distribution(tmp_path):
    """4 layers, up to 6 symbols: measured 95.7% and 97.3% exact match (seeds 0 and 1) in 3000
    steps. 2 layers reached 89% at 6 symbols and 63% at 8 (2000 steps)."""
    record = learn(
        tmp_path,
        "sort",
        3000,
        "model.net.n_layers=4",
        "task.train_lengths=[1,6]",
        "task.eval_lengths=[6]",
    )
    assert record["metrics"]["test_id"]["exact_match"] >= 0.9
