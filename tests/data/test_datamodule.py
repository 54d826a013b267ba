"""Training batches: a pure function of (seed, step), lengths drawn as ``data.length_sampling``
says."""

from collections import Counter

import pytest
import torch

from pelab.data.datamodule import TaskData, TrainBatches
from pelab.errors import ConfigError
from pelab.tasks import TASK_REGISTRY


@pytest.fixture
def copy_task():
    return TASK_REGISTRY["copy"](train_lengths=[1, 16])


def lengths(batches: TrainBatches) -> list[int]:
    return [batches[i][0].shape[1] for i in range(len(batches))]


def test_tokens_draw_each_length_in_proportion_to_itself(copy_task):
    """``P(n) = n / 136`` over lengths 1..16: every token position equally often."""
    drawn = Counter(lengths(TrainBatches(copy_task, 1, 13600, seed=0, length_sampling="tokens")))
    for n in range(1, 17):
        expected = 13600 * n / 136
        assert abs(drawn[n] - expected) < 4 * expected**0.5 + 5, (n, drawn[n], expected)
    assert drawn[16] > 10 * drawn[1]


def test_uniform_draws_every_length_equally_often_as_it_always_did(copy_task):
    batches = TrainBatches(copy_task, 1, 3200, seed=0, length_sampling="uniform")
    drawn = Counter(lengths(batches))
    assert set(drawn) == set(range(1, 17)) and max(drawn.values()) < 1.35 * min(drawn.values())
    # the stream of every run trained before the option existed
    expected = [
        int(torch.randint(1, 17, (1,), generator=torch.Generator().manual_seed(i)))
        for i in range(50)
    ]
    assert lengths(TrainBatches(copy_task, 1, 50, seed=0))[:50] == expected


def test_batches_are_a_pure_function_of_seed_and_step(copy_task):
    a = TrainBatches(copy_task, 4, 20, seed=3, length_sampling="tokens")
    b = TrainBatches(copy_task, 4, 20, seed=3, length_sampling="tokens")
    assert all(torch.equal(a[i][0], b[i][0]) for i in (0, 7, 19))


@pytest.mark.parametrize("make", [TrainBatches, TaskData])
def test_an_unknown_length_sampling_is_a_clear_error(copy_task, make):
    with pytest.raises(ConfigError, match="length_sampling='lengths'; valid choices: uniform"):
        make(copy_task, 4, 20, 0, length_sampling="lengths")
