"""The end of a run's W&B run: its outcome in the summary, its test per length as a table and a
chart, and its record among the run's files (``pelab.recorder`` calls it as each record ends)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig

from pelab.record import COMPETENCE_KEYS, COMPLETED


def finish_wandb(record: dict[str, Any], results: Path | None = None) -> None:
    """Close this job's W&B run with its outcome, which ``make_table.py wandb:<project>`` reads:
    ``status``, ``error``, the command-line ``overrides``, a member's ``member_of`` and the
    record's ``metrics`` section (as data) in the summary, the chance levels of the means beside
    ``test/id/*`` and ``test/ood/*``, and exit code 1 for a failure (W&B then shows the run as
    failed). For a reader of the run: the test per length as a table (``test/per_length``) and
    its exact match against length as a chart, and ``results`` (``results.json``) saved with
    the run as ``W_AND_B_RECORD``."""
    import wandb

    if wandb.run is None:
        return
    overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    metrics = record.get("metrics", {})
    competence = {k: record[k] for k in COMPETENCE_KEYS if k in record}
    chance = {
        f"{split}/{metric}": value
        for split in ("chance_id", "chance_ood")
        for metric, value in metrics.get(split, {}).items()
    }
    if metrics.get("test"):
        table = wandb.Table(columns=list(PER_LENGTH_COLUMNS), data=per_length_rows(record))
        chart = wandb.plot.line(table, "length", "exact_match", title="test exact match by length")
        wandb.log({"test/per_length": table, "test/exact_match_by_length": chart})
    if results is not None and results.is_file():  # named apart: local tools read results.json
        copy = Path(wandb.run.dir) / W_AND_B_RECORD
        shutil.copyfile(results, copy)
        wandb.save(str(copy), base_path=wandb.run.dir, policy="now")
    wandb.run.summary.update(
        {
            "status": record["status"],
            "error": record.get("error", ""),
            "overrides": overrides,
            "metrics": metrics,
            "train_lengths": record.get("train_lengths"),
            **competence,
            **({"member_of": record["member_of"]} if "member_of" in record else {}),
            **chance,
        }
    )
    wandb.finish(exit_code=0 if record["status"] == COMPLETED else 1)


# the run record's name among a W&B run's files (not results.json, which the local tools collect)
W_AND_B_RECORD = "pelab_record.json"
# the W&B table of a run's test, one row per length
PER_LENGTH_COLUMNS = (
    "length",
    "split",
    "exact_match",
    "token_acc",
    "chance_exact",
    "chance_token",
)


def per_length_rows(record: dict[str, Any]) -> list[list[Any]]:
    """A completed record's test, one row per length (``PER_LENGTH_COLUMNS``; chance None where
    the record has none)."""
    lo, hi = record["train_lengths"]
    chance = record["metrics"].get("chance", {})
    return [
        [
            int(length),
            "ID" if lo <= int(length) <= hi else "OOD",
            values["exact_match"],
            values["token_acc"],
            chance.get(length, {}).get("exact_match"),
            chance.get(length, {}).get("token_acc"),
        ]
        for length, values in record["metrics"]["test"].items()
    ]
