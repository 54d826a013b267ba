"""Lightning data: a stream of fresh training batches (one per member) and one evaluation loader
per length."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from pelab.data.eval_sets import load_eval_set
from pelab.errors import choices_checked
from pelab.reliability.resume.data import ResumableLoader
from pelab.tasks.base import Task

# ``data.length_sampling``: how a training batch draws its length from ``task.train_lengths``
LengthSampling = Literal["uniform", "tokens"]


class TrainBatches(Dataset):
    """Batch ``i`` of the run of ``seed``, a pure function of ``(seed, i)``: re-running or
    resuming a step gives the same batch.

    Its length is drawn from the task's train range (among the lengths the task can build,
    ``Task.lengths_between``) and is the same for every seed: the length seed 0's stream draws
    (``torch.Generator().manual_seed(i)``), so that the members of a stack meet in one stacked
    call (``pelab.lit_module``). The samples come from the seed's own stream
    (``manual_seed(seed * 1_000_003 + i)``) after its own length draw, so seed 0's batches are
    those of every run trained before lengths were shared.

    ``length_sampling``: ``uniform``, every length equally often (Delétang et al. 2023), or
    ``tokens``, a length in proportion to itself (``P(n) = n / sum of the buildable lengths``),
    so that every token position of the training range is trained equally often and the longest
    lengths, the hardest, are not starved (on copy with lengths 1-16 they get 12% of the batches
    instead of 6%; docs/performance.md, "Time to learn").

    ``curriculum_steps``: a length curriculum over the first N batches (0: none). Batch ``i``
    draws, as ``length_sampling`` says, among the buildable lengths up to
    ``lo + floor((hi - lo + 1) * i / N)`` of the range ``lo..hi`` (at least the shortest): the
    range opens one length at a time, each newest length for ``N / (hi - lo + 1)`` batches, and
    the shorter ones stay in the mix (the "naive" curriculum of Zaremba & Sutskever 2014,
    "Learning to Execute"); from batch ``N`` on, the whole range."""

    @choices_checked("data")
    def __init__(
        self,
        task: Task,
        batch_size: int,
        num_batches: int,
        seed: int,
        length_sampling: LengthSampling = "uniform",
        curriculum_steps: int = 0,
    ) -> None:
        self.task, self.batch_size, self.num_batches = task, batch_size, num_batches
        self.seed, self.length_sampling = seed, length_sampling
        self.lengths = task.lengths_between(*task.train_lengths)
        self.curriculum_steps = curriculum_steps

    def __len__(self) -> int:
        return self.num_batches

    def lengths_at(self, index: int) -> list[int]:
        """The lengths batch ``index`` may draw (``curriculum_steps``)."""
        if index >= self.curriculum_steps:
            return self.lengths
        low, high = self.task.train_lengths
        longest = low + (high - low + 1) * index // self.curriculum_steps
        return [length for length in self.lengths if length <= longest] or self.lengths[:1]

    def draw_length(self, generator: torch.Generator, index: int) -> int:
        lengths = self.lengths_at(index)
        if self.length_sampling == "uniform":
            return lengths[int(torch.randint(len(lengths), (1,), generator=generator))]
        weights = torch.tensor(lengths, dtype=torch.float64)
        return lengths[int(torch.multinomial(weights, 1, generator=generator))]

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        length = self.draw_length(torch.Generator().manual_seed(index), index)
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        self.draw_length(generator, index)  # its own draw: seed 0's stream as it always was
        return self.task.sample(self.batch_size, length, generator)


class MemberBatches(Dataset):
    """Item ``i``: the tuple of every member's batch ``i`` (``TrainBatches`` of its seed)."""

    def __init__(self, members: Sequence[TrainBatches]) -> None:
        self.members = list(members)

    def __len__(self) -> int:
        return len(self.members[0])

    def __getitem__(self, index: int) -> tuple[tuple[Tensor, Tensor], ...]:
        return tuple(member[index] for member in self.members)


def ignore_job_signals(worker_id: int) -> None:
    """A loader worker ignores SIGTERM and SIGUSR1 (pre-emption, SLURM's requeue), which reach
    the job's every process: the training process answers them (``pelab.reliability``), and a
    worker must neither die of them (the loader would fail the step that saves the checkpoint)
    nor run the handlers it inherits (save, requeue). It ends with its loader, or with the
    training process."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)


class TaskData(L.LightningDataModule):
    """The data of a run: a resumable stream of fresh training batches, one per member and step
    (``MemberBatches`` of ``seeds``), and one evaluation loader per length, shared by every
    member (the evaluation sets do not depend on the seed).

    The training loader resumes where it stopped (``ResumableLoader``): the next batch is the
    number of batches this epoch has processed (a checkpoint at a step's end or after
    validation has processed exactly the batches it trained on).

    ``num_workers``: every loader's worker processes (0: batches are made in the training
    process). Batch ``i`` stays a pure function of ``(seed, i)``: the loaders are map-style and
    each index, drawn in order in the training process, goes to one worker, which seeds its own
    generators from it. The workers are not persistent: a loader draws a number from torch's
    global RNG whenever it starts its workers, at every validation unless they persist (then
    once), so on the CPU dropout's and abacus's draws would depend on ``num_workers``, and a
    resumed run (whose loaders start afresh) would draw otherwise than the uninterrupted one;
    persistent evaluation loaders would also keep ``num_workers`` idle processes per length.
    With workers, a run on a CUDA device gets pinned batches (pinned by the loader's own thread,
    off the training loop). ``curriculum_steps``: ``TrainBatches``'s length curriculum."""

    @choices_checked("data")
    def __init__(
        self,
        task: Task,
        batch_size: int,
        num_batches: int,
        seeds: int | Sequence[int],
        eval_batch_size: int = 256,
        cache_dir: str | Path | None = None,
        val_lengths: list[int] | None = None,
        length_sampling: LengthSampling = "uniform",
        num_workers: int = 0,
        curriculum_steps: int = 0,
    ) -> None:
        super().__init__()
        if batch_size < 1 or eval_batch_size < 1:
            raise ValueError(f"batch sizes must be >= 1, got {batch_size}, {eval_batch_size}")
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(
                f"data.num_workers={num_workers!r}: it must be an int >= 0 (0: batches are made "
                "in the training process; N: by N worker processes)"
            )
        if isinstance(curriculum_steps, bool) or not isinstance(curriculum_steps, int):
            raise ValueError(f"data.curriculum_steps={curriculum_steps!r}: it must be an int")
        if not 0 <= curriculum_steps <= num_batches:
            raise ValueError(
                f"data.curriculum_steps={curriculum_steps}: it must be in [0, {num_batches}], the "
                "training steps (0: no curriculum; N: the training lengths open over the first "
                "N steps)"
            )
        self.num_workers, self.curriculum_steps = num_workers, curriculum_steps
        self.length_sampling = length_sampling
        self.task, self.batch_size, self.num_batches = task, batch_size, num_batches
        self.seeds = [seeds] if isinstance(seeds, int) else list(seeds)
        self.eval_batch_size, self.cache_dir = eval_batch_size, cache_dir
        self.val_lengths = task.eval_lengths if val_lengths is None else val_lengths

    def train_batches(self) -> MemberBatches:
        """The training set: item ``i`` is training step ``i``'s batch of every member."""
        return MemberBatches(
            TrainBatches(
                self.task,
                self.batch_size,
                self.num_batches,
                seed,
                self.length_sampling,
                self.curriculum_steps,
            )
            for seed in self.seeds
        )

    def loader_options(self) -> dict[str, Any]:
        """What every loader is given: batches pinned on a CUDA device (so the trainer's
        non-blocking copy does not wait for the GPU), and its workers (``num_workers``)."""
        device = None if self.trainer is None else self.trainer.strategy.root_device
        options: dict[str, Any] = {"pin_memory": device is not None and device.type == "cuda"}
        if self.num_workers:
            options |= {"num_workers": self.num_workers, "worker_init_fn": ignore_job_signals}
        return options

    def train_dataloader(self) -> ResumableLoader:
        def processed() -> int:
            return self.trainer.fit_loop.epoch_loop.batch_progress.current.processed

        return ResumableLoader(self.train_batches(), processed, **self.loader_options())

    def _eval_loaders(self, split: str, n: int, lengths: list[int]) -> list[DataLoader]:
        return [
            DataLoader(
                load_eval_set(self.task, split, length, n, self.cache_dir),
                batch_size=self.eval_batch_size,
                **self.loader_options(),
            )
            for length in lengths
        ]

    def val_dataloader(self) -> list[DataLoader]:
        """One loader per validation length (``val_lengths``: every evaluation length unless a
        competence budget validates the in-distribution ones only)."""
        return self._eval_loaders("val", self.task.n_val, self.val_lengths)

    def test_dataloader(self) -> list[DataLoader]:
        return self._eval_loaders("test", self.task.n_test, self.task.eval_lengths)
