"""The summary of a sweep as one W&B run beside the sweep's runs, when asked
(``scripts/make_table.py --wandb``: only training and re-evaluation make W&B runs otherwise)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from pelab.analysis.table import Ablation
from pelab.utils.wandb_mode import wandb_mode


def log_summary(
    result: Ablation, records: list[dict[str, Any]], out: Path, figures: list[Path]
) -> None:
    """One W&B run (``job_type=summary``, in the runs' project and, if they share one, group):
    both tables as read back from ``out/<table>.csv`` and the PNG figures."""
    import wandb

    settings = [(r.get("config") or {}).get("logger", {}).get("wandb") or {} for r in records]
    groups = {s.get("group") for s in settings}
    run = wandb.init(
        project=next((s["project"] for s in settings if s.get("project")), "pelab"),
        group=groups.pop() if len(groups) == 1 else None,
        job_type="summary",
        name=f"table-{result.metric}",
        dir=str(out),
        mode=wandb_mode(),
        config={
            "metric": result.metric,
            "rows": result.rows,
            "runs": len(result.runs),
            "caption": result.caption,  # the protocol, the seeds per cell, the fixed settings
        },
    )
    tables = {name: pd.read_csv(out / f"{name}.csv") for name in result.csv_names()}
    run.log(
        {name: wandb.Table(dataframe=frame) for name, frame in tables.items()}
        | {p.stem: wandb.Image(str(p)) for p in figures if p.suffix == ".png"}
    )
    run.finish()
