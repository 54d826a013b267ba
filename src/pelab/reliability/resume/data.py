"""Training data that resumes where it stopped.

Lightning restores a run's step counters but restarts a plain ``DataLoader`` from its first
batch, so a resumed run would train batch 0 again instead of batch ``k``. pelab's batch ``i`` is a
pure function of ``(seed, i)`` (``TrainBatches``), so resuming only needs the index of the next
batch: ``ResumableLoader`` saves it in the checkpoint (Lightning's ``state_dict`` interface for
loaders) and starts from it after a restart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import DataLoader, Dataset, Sampler


class StartAt(Sampler[int]):
    """Indices ``start .. n-1``; its length stays ``n`` (the epoch's length), so Lightning counts
    the resumed epoch's steps as if it had never stopped."""

    def __init__(self, n: int) -> None:
        self.n, self.start = n, 0

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.n))

    def __len__(self) -> int:
        return self.n


class ResumableLoader(DataLoader):
    """One batch per index of ``dataset`` (``batch_size=None``), in order, resumable:
    ``state_dict()`` is ``{"next_batch": next_batch()}``, the index training will use next.
    ``options``: ``DataLoader``'s others (``num_workers``, ``pin_memory``, ...)."""

    def __init__(self, dataset: Dataset, next_batch: Callable[[], int], **options: Any) -> None:
        super().__init__(dataset, batch_size=None, sampler=StartAt(len(dataset)), **options)
        self.next_batch = next_batch

    def state_dict(self) -> dict[str, Any]:
        return {"next_batch": int(self.next_batch())}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.sampler.start = state_dict["next_batch"]
