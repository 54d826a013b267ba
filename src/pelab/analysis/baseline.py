"""Baselines: the run records of a sweep shipped in the repository (``baselines/<name>/``, its
``results.json`` files only), so that a new encoding is compared with the whole zoo by training
that encoding alone: ``python scripts/make_table.py <your sweep> --baseline ablation_cpu``.

- ``save``: copy a sweep's training records into ``baselines/<name>/`` (same relative paths),
  with the paths of the machine made portable (``portable``);
- ``find``: a baseline's directory by name (a ``ConfigError`` listing the shipped ones);
- ``load``, ``check``: a baseline's records, refused for runs whose protocol differs
  (``protocol``), with each differing key and both values;
- ``with_origin``: the ``origin`` column of a runs frame (the baseline's name, or ``yours``), so
  a table tells the baseline's rows from the user's, also for an encoding in both.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from pelab.analysis.collect import load_records
from pelab.config_files import added_defaults
from pelab.errors import ConfigError
from pelab.record import MEMBER_KEYS, RESULTS, run_only, write_json_atomic

BASELINES = Path(__file__).resolve().parents[3] / "baselines"  # at the repository's root
ORIGIN = "origin"  # the runs-frame column naming where a run comes from
YOURS = "yours"  # the origin of every run outside baselines/
# config keys a run may change and still be compared: the compared settings, the seed and a
# stack's members, the run's name, and (``record.run_only``) paths, loggers,
# callbacks, tags, threads and the trainer's display; the run's directory
# settings a row may change against its baseline control (the compared setting: an encoding's
# options and layer schedule under ``pe``, the positions, a length scale of attention)
COMPARED = ("pe", "positions", "model.net.attn_scale")
FREE = (*COMPARED, "seed", *MEMBER_KEYS, "run_name", "run_lock_wait_s", "trainer.default_root_dir")
NO_RECORD = ("crashed", "missing")  # collect's rows of jobs that left no results.json
UNSET = "unset"


def available() -> list[str]:
    """The names of the baselines shipped in ``BASELINES``."""
    if not BASELINES.is_dir():
        return []
    return sorted(p.name for p in BASELINES.iterdir() if p.is_dir())


def find(name: str) -> Path:
    """The directory of the baseline ``name``; a ``ConfigError`` listing the shipped ones."""
    if name in available():
        return BASELINES / name
    choices = ", ".join(available()) or "none"
    raise ConfigError(f"--baseline {name}: unknown baseline; shipped in {BASELINES}: {choices}")


def load(name: str) -> list[dict[str, Any]]:
    """The training records of the baseline ``name`` (a ``ConfigError`` when it has none)."""
    records = load_records([find(name)])
    if not records:
        raise ConfigError(f"--baseline {name}: no runs (results.json) in {find(name)}")
    return records


def check(records: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The records of the baseline ``name``, once ``records`` (the user's training runs) are
    known to follow its protocol, task by task (the baseline's runs of a task share one); a
    ``ConfigError`` naming each differing key with both values otherwise."""
    shipped = load(name)
    theirs = protocols(shipped, f"baseline {name}")
    differing: dict[str, tuple[str, list[str]]] = {}
    for record in with_config(records):
        task = (record.get("choices") or {}).get("task")
        if task not in theirs:
            differing.setdefault("task", (", ".join(theirs), []))
            _add(differing["task"][1], str(task))
            continue
        for key, (base, yours) in differences(theirs[task], protocol(record)).items():
            _add(differing.setdefault(key, (base, []))[1], yours)
    if differing:
        listed = "; ".join(
            f"{key} {base} (baseline) vs {', '.join(yours)} (yours)"
            for key, (base, yours) in differing.items()
        )
        raise ConfigError(
            f"--baseline {name}: protocols differ: {listed}. Train your runs with the "
            f"baseline's settings (baselines/README.md) to compare them"
        )
    return shipped


def _add(values: list[str], value: str) -> None:
    if value not in values:
        values.append(value)


def with_config(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records that hold a run's resolved config (not collect's crashed or missing jobs)."""
    return [r for r in records if r.get("status") not in NO_RECORD and r.get("config")]


def protocol(record: dict[str, Any]) -> dict[str, str]:
    """The record's protocol: every resolved config key (dotted) but the ``FREE`` ones, with
    its value as text; a setting added since the record was written at its default
    (``config_files.added_defaults``)."""
    flat = added_defaults() | _flat(record.get("config") or {})  # a record before a setting
    return {
        key: _show(value)
        for key, value in flat.items()
        if not run_only(key) and not any(key == f or key.startswith(f"{f}.") for f in FREE)
    }


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat |= _flat(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def differences(theirs: dict[str, str], yours: dict[str, str]) -> dict[str, tuple[str, str]]:
    """``{key: (their value, your value)}`` for every key the two protocols do not share."""
    keys = dict.fromkeys([*theirs, *yours])
    return {
        k: (theirs.get(k, UNSET), yours.get(k, UNSET))
        for k in keys
        if theirs.get(k, UNSET) != yours.get(k, UNSET)
    }


def protocols(records: list[dict[str, Any]], what: str) -> dict[str, dict[str, str]]:
    """The one protocol of each task (its choice) of ``records``; a ``ConfigError`` naming the
    differing keys when runs of one task differ (``what``: whose runs, for the message)."""
    found: dict[str, dict[str, str]] = {}
    for record in with_config(records):
        task = str((record.get("choices") or {}).get("task"))
        mine = protocol(record)
        if differing := differences(found.setdefault(task, mine), mine):
            listed = "; ".join(f"{k} {a} vs {b}" for k, (a, b) in differing.items())
            raise ConfigError(f"{what}: the runs of task {task} differ in protocol: {listed}")
    return found


def save(sweep: str | Path, name: str) -> list[Path]:
    """Copy the training records (``results.json``) under ``sweep`` into ``baselines/<name>/`` at
    the same relative paths, made ``portable``; a baseline of that name is replaced. Refuses a
    sweep without runs or whose runs of a task differ in protocol. Returns the files written."""
    sweep = Path(sweep)
    records = [r for r in with_config(load_records([sweep])) if _from_file(r)]
    if not records:
        raise ConfigError(f"--save-baseline: no training runs (results.json) under {sweep}")
    protocols(records, f"--save-baseline {sweep}")
    target = BASELINES / name
    shutil.rmtree(target, ignore_errors=True)
    written = []
    for record in records:
        run = Path(record["source"])
        raw = json.loads((run / RESULTS).read_text())
        relative = run.relative_to(sweep)
        dest = target / relative / RESULTS
        written.append(write_json_atomic(dest, portable(raw, sweep_roots(sweep, relative, raw))))
    return written


def _from_file(record: dict[str, Any]) -> bool:
    return (Path(record["source"]) / RESULTS).is_file()


def sweep_roots(sweep: Path, relative: Path, record: dict[str, Any]) -> dict[str, str]:
    """``{absolute prefix: its replacement}``: the sweep as it lies now and as the run saw it
    (its ``paths.output_dir`` less the run's place in the sweep) -> ``""`` (relative to the
    baseline's directory), then the checkout the run ran in (``paths.root_dir``) -> ``""``
    (relative to the repository)."""
    paths = (record.get("config") or {}).get("paths") or {}
    output = str(paths.get("output_dir") or "")
    ran_in = output[: -len(str(relative))].rstrip("/") if output.endswith(str(relative)) else ""
    ran_in = ran_in if relative.parts else output
    roots = [str(sweep.absolute()), str(sweep.resolve()), ran_in, str(paths.get("root_dir", ""))]
    return {root: "" for root in roots if os.path.isabs(root) and root != "/"}


def portable(value: Any, roots: dict[str, str]) -> Any:
    """``value`` (a record, or any part of it) with every path under one of ``roots`` made
    relative (``<root>/a/b`` -> ``a/b``, ``<root>`` -> ``.``), in any string (an error's
    ``hydra.run.dir=...`` too); a string that is still an absolute path (outside the sweep and
    the checkout) becomes null."""
    if isinstance(value, dict):
        return {k: portable(v, roots) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v, roots) for v in value]
    if not isinstance(value, str):
        return value
    for root, replacement in sorted(roots.items(), key=lambda item: -len(item[0])):
        value = value.replace(f"{root}/", replacement)
        value = "." if value == root else value
    return None if os.path.isabs(value) and len(Path(value).parts) > 1 else value


def origin(source: Any) -> str:
    """The name of the baseline a run's ``source`` (its directory) lies in, or ``YOURS``."""
    try:
        return Path(str(source)).resolve().relative_to(BASELINES.resolve()).parts[0]
    except (ValueError, IndexError):
        return YOURS


def with_origin(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` (``frames.runs_frame``) with the ``ORIGIN`` column when any run comes from a
    baseline: a setting of its own, so the table's rows say whose runs they are."""
    if not len(runs):
        return runs
    names = runs["source"].map(origin)
    return runs if names.eq(YOURS).all() else runs.assign(**{ORIGIN: names})
