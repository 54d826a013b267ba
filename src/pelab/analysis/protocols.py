"""The protocols of a table (``PROTOCOLS``): which runs it reports, all seeds (``mean``), the
learning rate selected per row and task on validation (``tuned``), or the one best run on
validation (``max``, Deletang et al. 2023); never selected on test numbers."""

from __future__ import annotations

import pandas as pd

from pelab.errors import ConfigError

LR_AXIS = "model.optimizer.lr"  # the setting the tuned protocol selects per encoding and task
PROTOCOLS = {
    "mean": "Protocol: mean over seeds.",
    "tuned": (
        f"Protocol: tuned: per row and task, the {LR_AXIS} whose seeds have the best mean "
        "in-distribution validation score (exact match, then token accuracy), mean over its "
        "seeds; selected on validation, never on test numbers."
    ),
    "max": (
        "Protocol: max (Deletang et al. 2023): per row and task, the one run over seeds (and "
        f"{LR_AXIS}, when the runs vary it) with the best in-distribution validation score "
        "(exact match, then token accuracy); selected on validation, never on test numbers."
    ),
}


def select(runs: pd.DataFrame, rows: list[str], protocol: str) -> tuple[pd.DataFrame, list[str]]:
    """The runs a protocol reports and its row axes: all of them (``mean``); per row (the
    learning rate aside) and task, the runs of the learning rate with the best mean
    validation score (``tuned``, adding the column ``selected``), or the one best run
    (``max``). Groups without a completed run keep all their runs, so failures still show."""
    if protocol == "mean":
        return runs, rows
    if protocol == "tuned" and LR_AXIS not in rows:
        raise ConfigError(
            f"--protocol tuned selects a {LR_AXIS} per encoding and task, but the runs do not "
            f"vary it; sweep it (learning_rates=[1e-3,3e-3] or {LR_AXIS}=1e-3,3e-3)"
        )
    kept_rows = [r for r in rows if r != LR_AXIS]
    chosen = []
    for _, group in runs.groupby([*kept_rows, "task"], sort=False, observed=True):
        done = group[group["status"].eq("completed") & group["val_id"].notna()]
        if done.empty:
            chosen.append(group)
        elif protocol == "max":
            chosen.append(done.loc[[done["val_id"].idxmax()]])
        else:
            best_lr = done.groupby(LR_AXIS, sort=False)["val_id"].mean().idxmax()
            chosen.append(group[group[LR_AXIS].eq(best_lr)])
    selected = pd.concat(chosen).sort_index()
    if LR_AXIS in rows:
        selected = selected.assign(selected=selected[LR_AXIS])
    return selected, kept_rows
