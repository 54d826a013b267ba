"""Lightning data: a stream of fresh training batches and one evaluation loader per length."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from pelab.data.eval_sets import load_eval_set
from pelab.errors import ConfigError
from pelab.tasks.base import Task

# ``data.length_sampling``: how a training batch draws its length from ``task.train_lengths``
LENGTH_SAMPLING = ("uniform", "tokens")


def check_length_sampling(length_sampling: str) -> None:
    if length_sampling not in LENGTH_SAMPLING:
        choices = ", ".join(LENGTH_SAMPLING)
        raise ConfigError(f"data.length_sampling={length_sampling!r}; valid choices: {choices}")


class TrainBatches(Dataset):
    """Batch ``i`` is a pure function of ``(seed, i)``: its length is drawn from the task's train
    range (among the lengths the task can build, ``Task.lengths_between``), then the samples.
    Re-running or resuming a step gives the same batch.

    ``length_sampling``: ``uniform``, every length equally often (Delétang et al. 2023), or
    ``tokens``, a length in proportion to itself (``P(n) = n / sum of the buildable lengths``),
    so that every token position of the training range is trained equally often and the longest
    lengths, the hardest, are not starved (on copy with lengths 1-16 they get 12% of the batches
    instead of 6%; docs/performance.md, "Time to learn")."""

    def __init__(
        self,
        task: Task,
        batch_size: int,
        num_batches: int,
        seed: int,
        length_sampling: str = "uniform",
    ) -> None:
        check_length_sampling(length_sampling)
        self.task, self.batch_size, self.num_batches, self.seed = (
            task,
            batch_size,
            num_batches,
            seed,
        )
        self.length_sampling = length_sampling

    def __len__(self) -> int:
        return self.num_batches

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        lengths = self.task.lengths_between(*self.task.train_lengths)
        if self.length_sampling == "uniform":
            length = lengths[int(torch.randint(len(lengths), (1,), generator=generator))]
        else:
            weights = torch.tensor(lengths, dtype=torch.float64)
            length = lengths[int(torch.multinomial(weights, 1, generator=generator))]
        return self.task.sample(self.batch_size, length, generator)


class TaskDataModule(L.LightningDataModule):
    def __init__(
        self,
        task: Task,
        batch_size: int,
        num_batches: int,
        seed: int,
        eval_batch_size: int = 256,
        cache_dir: str | Path | None = None,
        val_lengths: list[int] | None = None,
        length_sampling: str = "uniform",
    ) -> None:
        super().__init__()
        if batch_size < 1 or eval_batch_size < 1:
            raise ValueError(f"batch sizes must be >= 1, got {batch_size}, {eval_batch_size}")
        check_length_sampling(length_sampling)
        self.length_sampling = length_sampling
        self.task, self.batch_size, self.num_batches, self.seed = (
            task,
            batch_size,
            num_batches,
            seed,
        )
        self.eval_batch_size, self.cache_dir = eval_batch_size, cache_dir
        self.val_lengths = task.eval_lengths if val_lengths is None else val_lengths

    def train_batches(self) -> Dataset:
        """The training set: item ``i`` is training step ``i``'s batch."""
        return TrainBatches(
            self.task, self.batch_size, self.num_batches, self.seed, self.length_sampling
        )

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_batches(), batch_size=None, shuffle=False)

    def _eval_loaders(self, split: str, n: int, lengths: list[int]) -> list[DataLoader]:
        return [
            DataLoader(
                load_eval_set(self.task, split, length, n, self.cache_dir),
                batch_size=self.eval_batch_size,
            )
            for length in lengths
        ]

    def val_dataloader(self) -> list[DataLoader]:
        """One loader per validation length (``val_lengths``: every evaluation length unless a
        competence budget validates the in-distribution ones only)."""
        return self._eval_loaders("val", self.task.n_val, self.val_lengths)

    def test_dataloader(self) -> list[DataLoader]:
        return self._eval_loaders("test", self.task.n_test, self.task.eval_lengths)
