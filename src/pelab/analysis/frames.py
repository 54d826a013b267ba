"""Records into pandas frames: ``runs_frame``, one row per run (its settings, status and
scores), and ``lengths_frame``, one row per run and evaluation length. A run's settings are its
choices, its seed and the settings it changed besides them (``setting_overrides``), each with
the value the run resolved (``setting_text``).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import ListConfig, OmegaConf

from pelab.config_files import added_defaults
from pelab.lengths import expand_lengths
from pelab.metrics import GROUPS as SPLITS
from pelab.metrics import METRICS
from pelab.record import CHOICE_GROUPS as CHOICES
from pelab.record import MEMBER_KEYS, member_settings, run_only

NOT_SET = "-"  # a choice or an override that a run did not set
# the columns of ``runs_frame`` besides the choices and the setting overrides
RUN_FIELDS = (
    "seed",
    "status",
    "error",
    "source",
    "train_min",
    "train_max",
    "wall_time_s",
    "learned",
    "steps_to_learn",
    *(f"{s}/{m}" for s in SPLITS for m in METRICS),
    "val_id",
)
# what a status without an error means
STATUS_NOTES = {"running": "no end recorded: still running, or killed (out of memory, time limit)"}


def setting_overrides(overrides: list[str]) -> dict[str, str]:
    """``["pe=rope", "model.net.d_model=32"]`` -> ``{"model.net.d_model": "32"}``: the settings a
    run changed besides its choices, seed (or the ``MEMBER_KEYS`` of a stack of members, whose
    own settings ``record.member_settings`` gives) and the ``record.RUN_ONLY`` settings (paths,
    loggers, callbacks, ...: they do not change what a run trains)."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    return {
        o.get_key_element(): o.get_value_element_as_str()
        for o in parsed
        if o.key_or_group not in (*CHOICES, "seed", *MEMBER_KEYS) and not run_only(o.key_or_group)
    }


def setting_text(value: Any) -> str | None:
    """A resolved setting as a table shows it (``0.003``, ``none``); None when unset."""
    if isinstance(value, ListConfig) and not any(OmegaConf.is_config(v) for v in value):
        return (
            "[" + ",".join(setting_text(v) or "null" for v in value) + "]"
        )  # as an override writes it
    if value is None or OmegaConf.is_config(value):
        return None
    return f"{value:g}" if isinstance(value, float) else str(value)


def runs_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per run: its choices, seed, setting overrides, status and error, the in- and
    out-of-distribution means of each metric (``id/exact_match``, ...; NaN unless completed),
    the training length range, the wall time, whether it learned its task (``learned``:
    True/False under a competence budget, None without one) and when (``steps_to_learn``), and
    its last in-distribution validation score (``val_id``: what ``--protocol max|tuned``
    selects on, never a test number). A setting's value is the one the run resolved (its
    ``config``), so a default, an override's ``3e-3`` and a member's ``0.003`` are one value;
    the override's text (or ``NOT_SET``) where the record has no resolved config."""
    rows, settings = [], {}
    for record in records:
        changed = setting_overrides(record.get("overrides") or []) | member_settings(record)
        settings |= dict.fromkeys(changed)
        choices = record.get("choices") or {}
        metrics = record.get("metrics") or {}
        train = record.get("train_lengths") or task_config(record).get("train_lengths") or []
        row: dict[str, Any] = {k: choices.get(k) or NOT_SET for k in CHOICES}
        row |= {
            "seed": choices.get("seed"),
            "status": record.get("status", "unknown"),
            "error": record.get("error") or STATUS_NOTES.get(record.get("status"), ""),
            "source": record.get("source", ""),
            "train_min": train[0] if train else math.nan,
            "train_max": train[1] if train else math.nan,
            "wall_time_s": record.get("wall_time_s", math.nan),
            # competence budgets (pelab.competence): None when the run had no criterion
            "learned": record.get("learned"),
            "steps_to_learn": _or_nan(record.get("steps_to_learn")),
        }
        for split in SPLITS:
            for metric in METRICS:
                row[f"{split}/{metric}"] = metrics.get(f"test_{split}", {}).get(metric, math.nan)
        row["val_id"] = _validation_score(metrics.get("val") or {}, train)
        rows.append(row | changed)
    if settings:  # (a config per record costs: none made where no setting was changed)
        _resolved_settings(rows, records, list(settings))
    frame = pd.DataFrame(rows)
    frame[list(settings)] = frame[list(settings)].fillna(NOT_SET)
    return frame.astype({"seed": "Int64"}) if len(frame) else frame


def _resolved_settings(rows: list[dict], records: list[dict], settings: list[str]) -> None:
    """Each row's ``settings`` as its run resolved them (settings equal once resolved merge);
    a record from before a setting existed ran at its default (``added_defaults``)."""
    added = added_defaults()
    for row, record in zip(rows, records, strict=True):
        config = OmegaConf.create(record.get("config") or {})
        for key in settings:
            value = setting_text(OmegaConf.select(config, key.lstrip("+~"), default=None))
            if value is None and record.get("config") and key.lstrip("+~") in added:
                value = setting_text(added[key.lstrip("+~")])
            if value is not None:
                row[key] = value


def lengths_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per run and evaluation length (``run``: the row in ``runs_frame``): the test
    metrics at that length and their chance levels (``chance/exact_match``, ...), NaN where the
    run has none (e.g. it failed; its configured lengths are listed all the same)."""
    chance_columns = [f"chance/{m}" for m in METRICS]
    rows = []
    for run, record in enumerate(records):
        metrics = record.get("metrics") or {}
        measured, chance = metrics.get("test", {}), metrics.get("chance", {})
        for length in measured or expand_lengths(task_config(record).get("eval_lengths") or []):
            values = measured.get(str(length), {})
            levels = chance.get(str(length), {})
            rows.append(
                {"run": run, "length": int(length)}
                | {m: values.get(m, math.nan) for m in METRICS}
                | {
                    c: levels.get(m, math.nan)
                    for c, m in zip(chance_columns, METRICS, strict=True)
                }
            )
    return pd.DataFrame(rows, columns=["run", "length", *METRICS, *chance_columns])


def task_config(record: dict[str, Any]) -> dict[str, Any]:
    """The record's resolved task config; ``{}`` when it has none, or only the task's name (a
    W&B sweep agent locks ``task`` to it)."""
    task = (record.get("config") or {}).get("task")
    return task if isinstance(task, dict) else {}


def _validation_score(val: dict[str, dict[str, float]], train: list[int]) -> float:
    """The last validation's in-distribution score, as a run's best checkpoint is chosen
    (``pelab.metrics.selection_score``: exact match, ties broken by next-token accuracy, or by
    token accuracy in a record from before issue 53, scaled below the exact match's step); NaN
    without an in-distribution validation."""
    inside = [v for n, v in val.items() if train and train[0] <= int(n) <= train[1]]
    if not inside:
        return math.nan
    exact = sum(v["exact_match"] for v in inside) / len(inside)
    tokens = sum(v.get("next_token_acc", v.get("token_acc", 0.0)) for v in inside) / len(inside)
    return exact + tokens * 1e-6


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else value
