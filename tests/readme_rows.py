"""The README's Components rows, read by the tests that hold them to the registries
(``tests/test_readme.py``) and to the shipped baseline (``tests/analysis/test_baseline.py``):
an encoding the README names is part of the shipped zoo (docs/encodings.md, "Shipping an
encoding with the zoo")."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
NAME = re.compile(r"`([a-z0-9_]+)`")  # `rope`, not `task=grid`


def readme_names(group: str) -> set[str]:
    """The names the README's ``| `<group>=` |`` row lists in backticks."""
    row = next(
        line for line in README.read_text().splitlines() if line.startswith(f"| `{group}=`")
    )
    return set(NAME.findall(row.split("|")[2]))


def not_shipped(encodings: list[str]) -> str:
    """The report on registered encodings the README and the shipped baseline do not hold."""
    return (
        f"pe={','.join(encodings)}: registered, not part of the shipped zoo (not in the "
        "README's Components row, no runs in baselines/ablation_cpu); a new encoding needs "
        "neither until it ships: docs/encodings.md, 'Shipping an encoding with the zoo'"
    )
