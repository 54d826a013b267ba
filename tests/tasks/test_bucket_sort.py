"""Bucket sort (Deletang et al. 2023): the paper's examples, properties, runs."""

import pytest
import torch

from pelab.tasks.bucket_sort import BucketSortTask
from tests.tasks.run_check import learn


def symbols(text: str) -> list[int]:
    return [3 + int(c) for c in text]


@pytest.mark.parametrize(
    ("text", "answer"),
    [("421302214", "011222344"), ("10204112", "00111224"), ("1110001", "0001111")],
)
def test_the_papers_examples(text, answer):
    assert BucketSortTask.reference(symbols(text)) == symbols(answer)
    assert BucketSortTask().solve(torch.tensor([symbols(text)])).tolist() == [symbols(answer)]


def test_five_symbols_by_default_and_counts_are_kept():
    task = BucketSortTask()
    assert task.vocab_size == 3 + 5
    prompt, answer = task.sample(64, 20, torch.Generator().manual_seed(0))
    assert (answer[:, 1:] >= answer[:, :-1]).all()
    for p, a in zip(prompt, answer, strict=True):
        assert torch.equal(torch.bincount(p, minlength=8), torch.bincount(a, minlength=8))


@pytest.mark.slow
def test_a_small_model_learns_bucket_sort_in_distribution(tmp_path):
    record = learn(
        tmp_path, "bucket_sort", 2000, "task.train_lengths=[1,8]", "task.eval_lengths=[8]"
    )
    assert record["metrics"]["test_id"]["exact_match"] >= 0.9
