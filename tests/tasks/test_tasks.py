import pytest
import torch

from pelab.pe.base import ConfigError
from pelab.tasks import N_SPECIAL, TASK_REGISTRY

TASKS = sorted(TASK_REGISTRY)


@pytest.mark.parametrize("name", TASKS)
@pytest.mark.parametrize("length", [1, 5, 64])
def test_generated_answers_equal_the_reference_solver(name, length):
    task = TASK_REGISTRY[name]()
    prompt, answer = task.sample(50, length, torch.Generator().manual_seed(length))
    for p, a in zip(prompt.tolist(), answer.tolist(), strict=True):
        assert a == task.reference(p)


@pytest.mark.parametrize("name", TASKS)
def test_tokens_stay_in_the_symbol_range_and_lengths_are_exact(name):
    task = TASK_REGISTRY[name](num_symbols=5)
    prompt, answer = task.sample(200, 9, torch.Generator().manual_seed(0))
    assert prompt.shape == (200, 9) and answer.shape == (200, task.answer_length(9))
    for t in (prompt, answer):
        assert t.min() >= N_SPECIAL and t.max() < task.vocab_size == N_SPECIAL + 5
    assert len(prompt.unique()) == 5  # every symbol is used


@pytest.mark.parametrize("name", TASKS)
def test_same_seed_same_data_other_seed_other_data(name):
    task = TASK_REGISTRY[name]()
    a = task.sample(8, 12, torch.Generator().manual_seed(3))
    b = task.sample(8, 12, torch.Generator().manual_seed(3))
    c = task.sample(8, 12, torch.Generator().manual_seed(4))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_hand_written_examples():
    prompt = torch.tensor([[5, 3, 4, 3]])
    assert TASK_REGISTRY["copy"]().solve(prompt).tolist() == [[5, 3, 4, 3]]
    assert TASK_REGISTRY["reverse"]().solve(prompt).tolist() == [[3, 4, 3, 5]]
    assert TASK_REGISTRY["sort"]().solve(prompt).tolist() == [[3, 3, 4, 5]]


def test_in_distribution_split_and_longest_sequence():
    task = TASK_REGISTRY["copy"](train_lengths=[2, 10], eval_lengths=[5, 10, 20])
    assert [task.in_distribution(n) for n in task.eval_lengths] == [True, True, False]
    assert task.max_sequence_length() == 20 + 20 + 2  # BOS, prompt, SEP, answer


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"train_lengths": [10, 2]}, r"train_lengths must be \[min, max\].*got \[10, 2\]"),
        ({"train_lengths": [0, 4]}, r"1 <= min"),
        ({"eval_lengths": [0, 8]}, r"eval_lengths must be .*>= 1, got \[0, 8\]"),
        ({"eval_lengths": []}, r"non-empty"),
        ({"eval_lengths": [32, 64]}, r"no in-distribution length"),
        ({"num_symbols": 1}, r"num_symbols must be >= 2"),
    ],
)
def test_bad_task_settings_are_refused_with_the_value(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        TASK_REGISTRY["copy"](**kwargs)
