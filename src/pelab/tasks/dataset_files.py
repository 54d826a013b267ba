"""The files of ``task=from_dataset``: reading a dataset from disk (``read_dataset``: a
``save_to_disk`` directory, or a CSV or JSON Lines file), every unreadable one a ``ConfigError``
that says why, and writing a tiny example (``write_example``)."""

from __future__ import annotations

from pathlib import Path

import datasets
import torch

from pelab.errors import ConfigError

# a data file's suffix -> the ``datasets`` loader that reads it (one ``Dataset``, no splits)
FILE_FORMATS = {".csv": "csv", ".json": "json", ".jsonl": "json"}


def read_dataset(path: str) -> datasets.Dataset | datasets.DatasetDict:
    """``path``: a directory written by ``save_to_disk``, or a CSV or JSON Lines file (read by
    ``datasets``' own CSV and JSON loaders)."""
    where = Path(path)
    if not where.exists():
        raise ConfigError(
            f"from_dataset: task.path {path!r} does not exist; give a directory written by "
            f"datasets' save_to_disk or a data file ({', '.join(FILE_FORMATS)})"
        )
    if where.is_file():
        loader = FILE_FORMATS.get(where.suffix.lower())
        if loader is None:
            raise ConfigError(
                f"from_dataset: task.path {path!r} is a {where.suffix or 'suffix-less'} file; "
                f"pelab reads {', '.join(FILE_FORMATS)} files and save_to_disk directories"
            )
        try:
            return datasets.load_dataset(loader, data_files=str(where), split="train")
        except Exception as error:  # the loader's own parse errors, whatever their type
            lines = [line for line in where.read_text(errors="replace").splitlines() if line]
            if len(lines) <= (1 if loader == "csv" else 0):  # nothing, or a CSV header only
                raise ConfigError(f"from_dataset: {path!r} has no rows") from None
            raise ConfigError(
                f"from_dataset: cannot read {path!r} as {loader.upper()}: "
                f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            ) from None
    try:
        return datasets.load_from_disk(path)
    except FileNotFoundError as error:
        raise ConfigError(
            f"from_dataset: task.path {path!r} is not a dataset saved with save_to_disk ({error})"
        ) from None
    except Exception as error:  # damaged files: datasets and pyarrow raise many types
        empty = saved_without_rows(where)
        raise ConfigError(
            f"from_dataset: task.path {path!r} "
            + (
                "holds a dataset with no rows"
                if empty
                else f"cannot be read ({type(error).__name__}: {str(error).splitlines()[0]}): "
                "its files are damaged; write it again with save_to_disk"
            )
        ) from None


def saved_without_rows(directory: Path) -> bool:
    """Whether ``save_to_disk`` wrote ``directory`` from an empty dataset (no data files)."""
    return not any(directory.rglob("*.arrow")) and any(directory.rglob("state.json"))


def write_example(
    directory: Path, size: int = 600, seed: int = 0, input_lengths: tuple[int, int] = (1, 12)
) -> str:
    """Write a tiny dataset to ``directory`` and return its path: inputs are random strings over
    ``abcd`` with lengths uniform in ``input_lengths`` (inclusive), targets the same strings
    without their ``a`` (so targets are ragged). ``size`` examples, one ``Dataset`` (no
    splits)."""
    generator = torch.Generator().manual_seed(seed)
    lo, hi = input_lengths
    lengths = torch.randint(lo, hi + 1, (size,), generator=generator).tolist()
    inputs = [
        "".join("abcd"[c] for c in torch.randint(0, 4, (n,), generator=generator).tolist())
        for n in lengths
    ]
    data = datasets.Dataset.from_dict(
        {"input": inputs, "target": [s.replace("a", "") for s in inputs]}
    )
    data.save_to_disk(str(directory))
    return str(directory)
