"""Selective copy (Gu & Dao 2023): hand-written prompts, a fixed number of data tokens at
uniform positions, length limits, runs."""

import pytest
import torch

from pelab.errors import ConfigError
from pelab.tasks.selective_copy import NOISE, SelectiveCopyTask
from tests.tasks.run_check import learn

_ = NOISE


def test_hand_written_prompts():
    assert SelectiveCopyTask.reference([_, 9, _, _, 5, _, 9, _]) == [9, 5, 9]
    assert SelectiveCopyTask.reference([7, 8, 9]) == [7, 8, 9]
    task = SelectiveCopyTask(num_tokens=3, train_lengths=[3, 8], eval_lengths=[8])
    prompts = torch.tensor([[_, 9, _, _, 5, _, 9, _], [7, 8, _, _, _, _, _, 9]])
    assert task.solve(prompts).tolist() == [[9, 5, 9], [7, 8, 9]]


def test_a_fixed_number_of_data_tokens_at_uniform_positions():
    task = SelectiveCopyTask(num_tokens=3, train_lengths=[3, 10], eval_lengths=[10])
    prompt, answer = task.sample(3000, 10, torch.Generator().manual_seed(0))
    is_data = prompt != NOISE
    assert (is_data.sum(dim=1) == 3).all() and answer.shape == (3000, 3)
    assert (answer != NOISE).all() and (answer < task.vocab_size).all()
    share = is_data.float().mean(dim=0)  # each position holds data with probability 3/10
    assert (share - 0.3).abs().max() < 0.04


def test_lengths_shorter_than_the_data_are_refused():
    with pytest.raises(ConfigError, match=r"cannot hold task.num_tokens=4.*lengths >= 4"):
        SelectiveCopyTask(train_lengths=[2, 16])
    with pytest.raises(ConfigError, match="at least two data symbols"):
        SelectiveCopyTask(num_symbols=2)


@pytest.mark.slow
def test_a_small_model_learns_selective_copy_in_distribution(tmp_path):
    lengths = ("task.train_lengths=[4,12]", "task.eval_lengths=[12]")
    record = learn(tmp_path, "selective_copy", 1000, *lengths)
    assert record["metrics"]["test_id"]["exact_match"] >= 0.9
