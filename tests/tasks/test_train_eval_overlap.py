"""Training and evaluation sets share no sample where the task's space is large (the test set
and a stream of 10k training prompts, 40 batches of 256), and do where it is small, as
docs/tasks.md states for each task."""

import pytest

from pelab.data.datamodule import TrainBatches
from pelab.data.eval_sets import build_eval_set
from pelab.tasks import TASK_REGISTRY


def shared_prompts(name: str, kwargs: dict, length: int, n_train_batches: int) -> float:
    """The share of the test set at ``length`` whose prompt occurs in a training stream of
    ``n_train_batches`` batches of 256 (all at ``length``)."""
    task = TASK_REGISTRY[name](train_lengths=[length, length], eval_lengths=[length], **kwargs)
    test = [tuple(p) for p in build_eval_set(task, "test", length, 512)["prompt"]]
    stream = TrainBatches(task, batch_size=256, num_batches=n_train_batches, seed=0)
    seen = {tuple(p) for i in range(len(stream)) for p in stream[i][0].tolist()}
    return sum(p in seen for p in test) / len(test)


@pytest.mark.parametrize(
    ("name", "kwargs", "length"),
    [
        ("copy", {}, 16),  # 32^16 prompts
        ("copy", {"variant": "double"}, 16),
        ("reverse", {}, 16),
        ("sort", {}, 16),
        ("sort", {"digits": 4}, 16),
        ("bucket_sort", {}, 16),  # 5^16 ~ 1.5e11
        ("addition", {}, 8),  # 10^16 operand pairs
        ("summation", {}, 16),  # 9^16 ~ 1.9e15
        ("polynomial_evaluation", {}, 8),  # 28^8 * 5 ~ 1.9e12
        ("lego", {}, 8),  # 26! / 18! names * 2^8 values * 8! orders
        ("lego", {"query": True}, 8),
        ("duplicate", {}, 40),  # binary tasks need the paper's lengths: 2^40 ~ 1.1e12
        ("odds_first", {}, 40),
        ("binary_addition", {}, 40),
        ("binary_multiplication", {}, 40),
        ("compute_sqrt", {}, 40),  # 2^40 - 1 numbers
        ("missing_duplicate_string", {}, 61),  # 2^30 strings, 60 holes; 40 tokens: ~4e7 prompts
        ("parity", {}, 40),  # short lengths repeat by necessity: 2^n prompts of n bits
        ("even_pairs", {}, 40),
        ("cycle_navigation", {}, 30),  # 3^30
        ("counting", {}, 30),
        ("flip_flop", {}, 30),
        ("stack_manipulation", {}, 30),
        ("modular_arithmetic", {}, 31),
        ("modular_arithmetic", {"brackets": True}, 31),
        ("solve_equation", {}, 31),
        ("selective_copy", {}, 32),
        ("associative_recall", {}, 8),
        ("pcfg", {}, 8),  # about 26 letters of 520 per expression
    ],
)
def test_large_spaces_share_nothing(name, kwargs, length):
    assert shared_prompts(name, kwargs, length, n_train_batches=40) == 0.0


@pytest.mark.parametrize(
    ("name", "kwargs", "length"),
    [
        ("copy", {"variant": "repeated"}, 16),  # 32 prompts per length
        ("duplicate", {}, 8),  # 2^8 = 256 prompts
        ("odds_first", {}, 8),
        ("missing_duplicate_string", {}, 8),  # 2^4 strings, 8 holes: 128 prompts
        ("compute_sqrt", {}, 8),  # 255 numbers
        ("addition", {}, 2),  # 10^4 operand pairs
        ("summation", {}, 3),  # 9^3 = 729
        ("polynomial_evaluation", {}, 1),  # 28 terms * 5 points = 140
        ("scan", {}, 22),  # 576 commands of 22 actions (20,910 in all)
    ],
)
def test_small_spaces_are_seen_in_training(name, kwargs, length):
    assert shared_prompts(name, kwargs, length, n_train_batches=20) > 0.3
