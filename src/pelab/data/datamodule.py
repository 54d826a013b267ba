"""Lightning data: a stream of fresh training batches and one evaluation loader per length."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from pelab.data.eval_sets import load_eval_set
from pelab.tasks.base import Task


class TrainBatches(Dataset):
    """Batch ``i`` is a pure function of ``(seed, i)``: its length is drawn uniformly from the
    task's train range, then the samples. Re-running or resuming a step gives the same batch."""

    def __init__(self, task: Task, batch_size: int, num_batches: int, seed: int) -> None:
        self.task, self.batch_size, self.num_batches, self.seed = (
            task,
            batch_size,
            num_batches,
            seed,
        )

    def __len__(self) -> int:
        return self.num_batches

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        lo, hi = self.task.train_lengths
        length = int(torch.randint(lo, hi + 1, (1,), generator=generator))
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
    ) -> None:
        super().__init__()
        if batch_size < 1 or eval_batch_size < 1:
            raise ValueError(f"batch sizes must be >= 1, got {batch_size}, {eval_batch_size}")
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
        return TrainBatches(self.task, self.batch_size, self.num_batches, self.seed)

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
