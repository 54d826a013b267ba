"""Your own data: input and target sequences from a ``datasets`` dataset saved on disk, or from
a CSV or JSON Lines file."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import datasets
import torch
from torch import Tensor

from pelab.errors import ConfigError
from pelab.tasks.base import Task, register_task
from pelab.tasks.dataset_files import read_dataset, write_example
from pelab.tokens import N_SPECIAL

PAD = "<pad>"  # the vocabulary's last item when some targets are shorter than others


@register_task("from_dataset")
class FromDatasetTask(Task):
    """Examples ``(input, target)`` read from ``datasets.load_from_disk(path)``; the length axis
    is the input's length, so the usual protocol applies: train on the input lengths in
    ``train_lengths``, evaluate at every ``eval_lengths``. ``BOS <input> SEP`` -> ``<target>``.

    Data. ``path`` holds a ``Dataset`` or a ``DatasetDict`` written by ``save_to_disk``, or is a
    ``.csv``, ``.json`` or ``.jsonl`` file (one ``Dataset``, read by ``datasets``), with the
    columns ``input_column`` and ``target_column``. Each cell is a sequence: a string (one
    token per character), a list of strings (one token per item) or a list of integers (CSV
    cells are strings).

    Vocabulary. Every distinct item of both columns, over all splits, sorted (by ``sorted``:
    strings alphabetically, integers numerically), is one symbol: the ``i``-th item is token
    ``N_SPECIAL + i``, so token ids of the user's data are re-numbered, never used raw.
    ``task.vocabulary`` lists the items; ``num_symbols`` follows from the data (leave it out).

    Ragged targets. All answers at one input length must have one length: targets shorter than
    the longest target among the examples of that input length are right-padded with ``<pad>``
    (a symbol of its own, last in the vocabulary, only there when needed). The padding is part
    of the answer: exact match and token accuracy include it, so the model must also say where
    its answer ends.

    Splits. With a ``DatasetDict``, training uses the split ``train_split`` and evaluation
    (validation and test) the split ``eval_split``; keeping them apart is the dataset's job.
    With a single ``Dataset``, a share ``holdout`` of the distinct inputs of every training
    length (chosen with ``eval_seed``) is held out for evaluation, with every row that has
    them, so no evaluation input is trained on; at lengths outside the training range every
    example is evaluation data. Each training batch draws its examples uniformly with
    replacement at one length, from the training examples; a validation (test) set draws up to
    ``n_val`` (``n_test``) of the evaluation examples of its length without replacement (each row
    at most once, so a row the dataset repeats can occur twice), also at training lengths. Every
    training length needs a training example and every evaluation length an evaluation example;
    otherwise the error lists the lengths that have them.

    An input seen with two different targets keeps both: ``reference`` gives the first.
    """

    length_axis = "input tokens"

    def __init__(
        self,
        path: str,
        input_column: str = "input",
        target_column: str = "target",
        train_split: str = "train",
        eval_split: str = "test",
        holdout: float = 0.1,
        **common: Any,
    ) -> None:
        if not 0.0 < holdout < 1.0:
            raise ConfigError(f"from_dataset: task.holdout must be in (0, 1), got {holdout}")
        self.path, self.input_column, self.target_column = str(path), input_column, target_column
        self.train_split, self.eval_split, self.holdout = train_split, eval_split, float(holdout)
        examples = self._encode(read_dataset(self.path))
        self.fixed_num_symbols = len(self.vocabulary)
        super().__init__(**common)  # validates the lengths and sets eval_seed
        self._make_pools(self._hold_out(examples["all"]) if "all" in examples else examples)
        self._check_pools()

    @classmethod
    def example_settings(cls, directory: Path) -> dict[str, Any]:
        """A tiny dataset (``write_example``) in ``directory``, trained on inputs of 1-8."""
        path = write_example(Path(directory) / "drop_a")
        return {"path": path, "train_lengths": [1, 8], "eval_lengths": [4, 8, 12]}

    @classmethod
    def settings_at(cls, length: int, directory: Path) -> dict[str, Any]:
        """A dataset of ``write_example``'s rule with 256 inputs of ``length`` letters."""
        path = write_example(
            Path(directory) / f"drop_a_{length}", 256, input_lengths=(length,) * 2
        )
        return {"path": path}

    # -- loading --------------------------------------------------------------------------------

    def _encode(
        self, data: datasets.Dataset | datasets.DatasetDict
    ) -> dict[str, list[tuple[list[int], list[int]]]]:
        """The vocabulary, and the examples as token ids: ``{"train", "eval"}`` from a
        ``DatasetDict``'s splits, or ``{"all"}`` from one ``Dataset``."""
        if isinstance(data, datasets.DatasetDict):
            for split in (self.train_split, self.eval_split):
                if split not in data:
                    raise ConfigError(
                        f"from_dataset: {self.path} has no split {split!r}; its splits are "
                        f"{sorted(data)} (set task.train_split and task.eval_split)"
                    )
            parts = {"train": data[self.train_split], "eval": data[self.eval_split]}
        else:
            parts = {"all": data}
        rows = {name: self._columns(part) for name, part in parts.items()}
        items = {
            item for inputs, targets in rows.values() for seq in inputs + targets for item in seq
        }
        ragged = _has_ragged_targets(rows)
        try:
            self.vocabulary = sorted(items) + ([PAD] if ragged else [])
        except TypeError:
            raise ConfigError(
                f"from_dataset: the sequences in {self.path} mix item types (e.g. strings and "
                "integers); use one type for every input and target"
            ) from None
        index = {item: N_SPECIAL + i for i, item in enumerate(self.vocabulary)}
        self._pad = index.get(PAD)
        return {
            name: [
                ([index[x] for x in i], [index[y] for y in t])
                for i, t in zip(inputs, targets, strict=True)
            ]
            for name, (inputs, targets) in rows.items()
        }

    def _make_pools(self, examples: dict[str, list[tuple[list[int], list[int]]]]) -> None:
        """Per pool (``train``/``eval``) and input length ``n``: the inputs ``[k, n]`` and the
        padded targets ``[k, m]`` of its ``k`` examples; the reference's lookup table."""
        self._answer_length: dict[int, int] = {}
        for encoded in examples.values():
            for i, t in encoded:
                self._answer_length[len(i)] = max(self._answer_length.get(len(i), 0), len(t))
        self.pools = {name: self._by_length(encoded) for name, encoded in examples.items()}
        self._target_of: dict[tuple[int, ...], list[int]] = {}
        for name in ("train", "eval"):
            for i, t in examples[name]:
                self._target_of.setdefault(tuple(i), self._padded(t, len(i)))
        self._digest = self._fingerprint()

    def _padded(self, target: list[int], length: int) -> list[int]:
        return target + [self._pad] * (self._answer_length[length] - len(target))

    def _fingerprint(self) -> str:
        """A hash of every example of every pool: the cache key changes with the data."""
        digest = hashlib.sha256()
        for name in sorted(self.pools):
            for n, (inputs, targets) in sorted(self.pools[name].items()):
                digest.update(f"{name}/{n}".encode())
                digest.update(inputs.numpy().tobytes() + targets.numpy().tobytes())
        return digest.hexdigest()[:16]

    def _columns(self, part: datasets.Dataset) -> tuple[list[list[Any]], list[list[Any]]]:
        missing = [
            c for c in (self.input_column, self.target_column) if c not in part.column_names
        ]
        if missing:
            raise ConfigError(
                f"from_dataset: {self.path} has no column {missing[0]!r}; its columns are "
                f"{part.column_names} (set task.input_column and task.target_column)"
            )
        if len(part) == 0:
            raise ConfigError(f"from_dataset: {self.path} has no rows")
        inputs, targets = part[self.input_column], part[self.target_column]
        for column, values in ((self.input_column, inputs), (self.target_column, targets)):
            for value in values:
                if not isinstance(value, str | list):
                    raise ConfigError(
                        f"from_dataset: column {column!r} of {self.path} must hold sequences "
                        f"(a string, a list of strings or a list of integers), got {value!r}"
                    )
        empty = sum(1 for value in inputs if len(value) == 0)
        if empty:
            raise ConfigError(f"from_dataset: {empty} empty inputs in {self.path}")
        return [list(v) for v in inputs], [list(v) for v in targets]

    def _hold_out(
        self, encoded: list[tuple[list[int], list[int]]]
    ) -> dict[str, list[tuple[list[int], list[int]]]]:
        """Split one dataset by distinct inputs: at each training length a share ``holdout`` of
        the distinct inputs (at least one when there are two) and all their rows are evaluation
        data, so no evaluation input is ever trained on; other lengths are all evaluation."""
        lo, hi = self.train_lengths
        rows_of: dict[int, dict[tuple[int, ...], list[int]]] = {}
        for row, (i, _) in enumerate(encoded):
            rows_of.setdefault(len(i), {}).setdefault(tuple(i), []).append(row)
        generator = torch.Generator().manual_seed(self.eval_seed)
        split: dict[str, list[tuple[list[int], list[int]]]] = {"train": [], "eval": []}
        for n, groups in sorted(rows_of.items()):
            inputs = list(groups.values())
            order = torch.randperm(len(inputs), generator=generator).tolist()
            held = max(1, round(self.holdout * len(inputs))) if len(inputs) > 1 else 0
            if not lo <= n <= hi:
                held = len(inputs)
            for k, at in enumerate(order):
                split["eval" if k < held else "train"].extend(encoded[r] for r in inputs[at])
        return split

    def _by_length(
        self, encoded: list[tuple[list[int], list[int]]]
    ) -> dict[int, tuple[Tensor, Tensor]]:
        grouped: dict[int, tuple[list[list[int]], list[list[int]]]] = {}
        for i, t in encoded:
            inputs, targets = grouped.setdefault(len(i), ([], []))
            inputs.append(i)
            targets.append(self._padded(t, len(i)))
        return {n: (torch.tensor(i), torch.tensor(t)) for n, (i, t) in grouped.items()}

    def _check_pools(self) -> None:
        needs = {"train": range(self.train_lengths[0], self.train_lengths[1] + 1)}
        needs["eval"] = self.eval_lengths
        for name, lengths in needs.items():
            missing = [n for n in lengths if n not in self.pools[name]]
            if missing:
                have = sorted(self.pools[name])
                raise ConfigError(
                    f"from_dataset: no {name} examples with input length {missing} in "
                    f"{self.path}; {name} examples have input lengths {_ranges(have)} (set "
                    f"task.train_lengths and task.eval_lengths to lengths that have examples)"
                )

    # -- the task interface ---------------------------------------------------------------------

    def answer_length(self, length: int) -> int:
        return self._answer_length[length]

    def spec(self) -> dict[str, Any]:
        return {
            **super().spec(),
            "path": self.path,
            "input_column": self.input_column,
            "target_column": self.target_column,
            "train_split": self.train_split,
            "eval_split": self.eval_split,
            "holdout": self.holdout,
            "data": self._digest,
        }

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """``batch`` examples of input ``length``, uniformly with replacement: training examples
        inside the training range, evaluation examples outside it."""
        inputs, targets = self.pools["train" if self.in_distribution(length) else "eval"][length]
        pick = torch.randint(0, inputs.shape[0], (batch,), generator=generator)
        return inputs[pick], targets[pick]

    def sample_eval(
        self, split: str, batch: int, length: int, generator: torch.Generator
    ) -> tuple[Tensor, Tensor]:
        """Up to ``batch`` rows of the evaluation examples of input ``length``, without
        replacement: both splits draw from that one pool, each with its own generator."""
        inputs, targets = self.pools["eval"][length]
        pick = torch.randperm(inputs.shape[0], generator=generator)[:batch]
        return inputs[pick], targets[pick]

    def solve(self, prompt: Tensor) -> Tensor:
        return torch.tensor([self.reference(row) for row in prompt.tolist()])

    def reference(self, prompt: list[int]) -> list[int]:
        return list(self._target_of[tuple(prompt)])


def _has_ragged_targets(rows: dict[str, tuple[list[list[Any]], list[list[Any]]]]) -> bool:
    target_lengths: dict[int, set[int]] = {}
    for inputs, targets in rows.values():
        for i, t in zip(inputs, targets, strict=True):
            target_lengths.setdefault(len(i), set()).add(len(t))
    return any(len(lengths) > 1 for lengths in target_lengths.values())


def _ranges(lengths: list[int]) -> str:
    """``[1, 2, 3, 5]`` -> ``"1-3, 5"``."""
    spans: list[list[int]] = []
    for n in lengths:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in spans) or "none"
