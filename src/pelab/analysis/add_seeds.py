"""Seeds added where they decide (issue 44, item 2; issue 52, items 3-4): ``make_table.py
<sources> [--baseline NAME] [--reference pe=rope] --add-seeds --budget 30min [--split OOD]
[--run]``.

The undecided comparisons (``reference_targets``: of ``--reference``'s declared family;
``best_targets``: a bold cell that is not its column's best) are decided by bringing both cells
to the planned look that would decide them (``sequential.seeds_to_decide``: 80% power at that
look's share of alpha), so the seeds are added validly: the tests count every planned look. The
plan takes them cheapest first, each costed from the records' own wall times, while the budget
lasts; seeds a comparison shares with another (the same reference or best cell) are paid once.
Each cell's new seeds are one job of the same protocol (the runs' fixed settings and the row's
own, members stacked as usual), written beside the cell's runs (``place``): a baseline's cell
into that baseline, every other into the first source, so the same ``make_table.py`` command
reads old and new seeds together in the same cells. The look is recorded (``looks``).
"""

from __future__ import annotations

import json
import math
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pandas as pd

from pelab.analysis import baseline
from pelab.analysis.baseline import ORIGIN, YOURS, portable, sweep_roots
from pelab.analysis.frames import NOT_SET
from pelab.analysis.table import Ablation, fixed_settings
from pelab.errors import ConfigError
from pelab.record import RESULTS, write_json_atomic

# each member of a stack past the first costs this share of one run (seeds=[0,1,2] took 1.84x
# one run on 2 CPU cores, 2026-11-25: README); a cell's runs were one stack
STACK_COST = 0.42
UNITS = {"s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600}


def parse_budget(text: str) -> float:
    """``30min``, ``2h``, ``90s`` or plain seconds -> seconds; a ``ConfigError`` otherwise."""
    found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-z]*)\s*", str(text))
    if not found or (found[2] and found[2] not in UNITS):
        raise ConfigError(
            f"--budget {text}: give a time such as 30min, 2h or 90s (units: {', '.join(UNITS)})"
        )
    return float(found[1]) * UNITS.get(found[2] or "s", 1)


@dataclass
class Addition:
    """Seeds to add to one cell: its settings (``key=value`` overrides, the task included), the
    seeds it has, the new ones, their estimated time, the comparisons they serve, whose runs the
    cell holds (``origin``: a baseline's name or ``yours``) and the sweep directory its job
    writes into (``place``)."""

    settings: list[str]
    have: int
    seeds: list[int]
    seconds: float
    decides: list[str] = field(default_factory=list)
    origin: str = YOURS
    sweep_dir: Path | None = None


@dataclass(frozen=True)
class Target:
    """An undecided comparison that a planned look would decide: both cells (row settings and
    task, as ``(*rows, task)``) brought to ``seeds`` seeds; ``seen``: its p when planned."""

    seeds: int
    cell: tuple
    other: tuple
    name: str
    seen: float


def best_targets(result: Ablation, split: str | None = "OOD") -> list[Target]:
    """The undecided comparisons with each column's best (bold cells that are not the best) of
    ``result``'s first metric, in ``split`` columns (None: every column); beside a baseline
    (``origin`` a row setting), only those of the user's own rows (origin ``yours``), so no
    time goes to the baseline's comparisons among themselves or to tasks the user never ran."""
    keys = [*result.rows, "task"]
    stats = _columns(result.by_task, result.metric, split)
    targets = _targets(stats, keys, "top", "p_vs_top", lambda top: str(top[0]))
    if ORIGIN in result.rows:
        at = keys.index(ORIGIN)
        targets = [t for t in targets if YOURS in (t.cell[at], t.other[at])]
    return targets


def reference_targets(
    compared: pd.DataFrame, rows: list[str], metric: str, split: str | None = "OOD"
) -> list[Target]:
    """The undecided comparisons of a reference table (``reference.versus``) of ``metric``, in
    ``split`` columns (None: every column), that a planned look would decide."""
    stats = _columns(compared, metric, split)
    return _targets(stats, [*rows, "task"], "reference", "p_holm", " · ".join)


def _targets(
    stats: pd.DataFrame, keys: list[str], anchor: str, p: str, named: Callable[[tuple], str]
) -> list[Target]:
    """Per column, each cell with a finite ``seeds_to_decide`` against the column's ``anchor``
    cell (its best, or the reference), named ``<cell> vs <named(anchor)> (<split>)``."""
    targets = []
    for _, column in stats.groupby(["task", "split"], observed=True, sort=False):
        anchors = column[column[anchor]]
        if anchors.empty:
            continue
        other = tuple(anchors.iloc[0][keys])
        for _, cell in column[column["seeds_to_decide"].notna()].iterrows():
            if math.isinf(cell["seeds_to_decide"]):
                continue
            name = f"{' · '.join(map(str, cell[keys]))} vs {named(tuple(map(str, other)))} "
            name += f"({cell['split']})"
            seeds = int(cell["seeds_to_decide"])
            targets.append(Target(seeds, tuple(cell[keys]), other, name, cell[p]))
    return targets


def _columns(stats: pd.DataFrame, metric: str, split: str | None) -> pd.DataFrame:
    stats = stats[stats["metric"] == metric]
    return stats if split is None else stats[stats["split"] == split]


def plan(result: Ablation, targets: list[Target], budget_s: float) -> list[Addition]:
    """The seeds to add, per cell, that decide the most ``targets`` (comparisons of
    ``result``'s cells) within ``budget_s`` seconds, cheapest comparison first; each cell to
    the planned look its comparisons need."""
    keys = [*result.rows, "task"]
    target: dict[tuple, int] = {}  # cell -> seeds it will have
    decides: dict[tuple, list[str]] = {}
    spent = 0.0
    have = _seeds(result.runs, keys)

    def cost(cell: tuple, seeds: int) -> float:
        """The time to bring ``cell`` to ``seeds`` seeds, beyond what the plan already adds."""
        now = max(target.get(cell, 0), have.get(cell, 0))
        return _job_seconds(result.runs, keys, cell, seeds - now) if seeds > now else 0.0

    ordered = sorted(targets, key=lambda t: cost(t.cell, t.seeds) + cost(t.other, t.seeds))
    for each in ordered:
        extra = cost(each.cell, each.seeds) + cost(each.other, each.seeds)
        if spent + extra > budget_s:
            continue
        spent += extra
        for cell in (each.cell, each.other):
            target[cell] = max(target.get(cell, 0), each.seeds, have.get(cell, 0))
            decides.setdefault(cell, []).append(each.name)
    additions = []
    for cell, seeds in target.items():
        if seeds <= have.get(cell, 0):
            continue
        first = _next_seed(result.runs, keys, cell)
        new = list(range(first, first + seeds - have[cell]))
        settings = [f"{k}={v}" for k, v in zip(keys, cell, strict=True) if _is_setting(k, v)]
        seconds = _job_seconds(result.runs, keys, cell, len(new))
        origin = dict(zip(keys, cell, strict=True)).get(ORIGIN, YOURS)
        additions.append(Addition(settings, have[cell], new, seconds, decides[cell], str(origin)))
    return additions


def place(additions: list[Addition], source: str) -> list[Addition]:
    """Each addition's sweep directory: a baseline's cell into that baseline (its added runs
    keep its origin), every other into the first ``source``; one date for all."""
    date = f"added_seeds_{datetime.now():%Y-%m-%d_%H-%M-%S}"
    for addition in additions:
        root = Path(source) if addition.origin == YOURS else baseline.find(addition.origin)
        addition.sweep_dir = root / date
    return additions


def commands(result: Ablation, additions: list[Addition]) -> list[list[str]]:
    """One ``scripts/train.py`` command per addition: the runs' fixed settings, the cell's, its
    new seeds as the members of one job, into its sweep directory."""
    fixed = [f"{k}={v}" for k, v in fixed_settings(result.runs).items() if _is_setting(k, v)]
    return [
        [
            sys.executable,
            "scripts/train.py",
            "-m",
            *(f for f in fixed if f not in a.settings),  # the task is fixed in a one-task table
            *a.settings,
            f"seeds=[{','.join(map(str, a.seeds))}]",
            f"hydra.sweep.dir={a.sweep_dir}",
        ]
        for a in additions
    ]


def report(additions: list[Addition], cmds: list[list[str]], budget_s: float) -> str:
    """The plan as text: per cell its seeds, time and comparisons, and its command."""
    if not additions:
        return (
            "--add-seeds: no undecided comparison is decidable within the budget "
            f"({budget_s / 60:.0f} min): see each cell's 'k seeds decide' and the column's "
            "'detectable' row"
        )
    total = sum(a.seconds for a in additions)
    lines = [
        f"--add-seeds: {sum(len(a.seeds) for a in additions)} runs in {len(additions)} jobs, "
        f"about {total / 60:.0f} min of {budget_s / 60:.0f} (estimated from the records' wall "
        "times, run one after another):"
    ]
    for addition, cmd in zip(additions, cmds, strict=True):
        lines.append(
            f"- {' '.join(addition.settings)}: {addition.have} seeds + {addition.seeds}, "
            f"~{addition.seconds / 60:.1f} min; decides {'; '.join(addition.decides)}"
        )
        lines.append(f"    {shlex.join(cmd)}")
    return "\n".join(lines)


def run(cmds: list[list[str]], cwd: Path) -> int:
    """Each command, one after another; the number that failed (the others go on)."""
    failed = 0
    for i, cmd in enumerate(cmds, 1):
        print(f"[{i}/{len(cmds)}] {shlex.join(cmd[1:])}", flush=True)
        failed += subprocess.run(cmd, cwd=cwd).returncode != 0
    return failed


def ship(sweep_dir: Path) -> int:
    """Keep of a run into a shipped baseline (``baselines/<name>/...``) what every shipped
    baseline keeps: each ``results.json``, made portable (``baseline.portable``: no absolute
    path), and nothing else (checkpoints, logs, Hydra's files). Returns the records kept."""
    kept = 0
    for path in sorted(sweep_dir.rglob("*"), key=lambda p: -len(p.parts)):  # deepest first
        if path.is_file() and path.name == RESULTS:
            record = json.loads(path.read_text())
            roots = sweep_roots(sweep_dir, path.parent.relative_to(sweep_dir), record)
            write_json_atomic(path, portable(record, roots))
            kept += 1
        elif path.is_file() or path.is_symlink():
            path.unlink()
        elif not any(path.iterdir()):  # a folder its files left
            path.rmdir()
    return kept


def _is_setting(key: str, value: object) -> bool:
    return key != ORIGIN and value != NOT_SET and value is not None


def _cell_runs(runs: pd.DataFrame, keys: list[str], cell: tuple) -> pd.DataFrame:
    chosen = pd.Series(True, index=runs.index)
    for key, value in zip(keys, cell, strict=True):
        chosen &= runs[key].astype(str) == str(value)
    return runs[chosen]


def _seeds(runs: pd.DataFrame, keys: list[str]) -> dict[tuple, int]:
    """Seeds with a result per cell."""
    done = runs[runs["status"].eq("completed")]
    return {k: int(v) for k, v in done.groupby(keys, observed=True)["seed"].nunique().items()}


def _next_seed(runs: pd.DataFrame, keys: list[str], cell: tuple) -> int:
    return int(_cell_runs(runs, keys, cell)["seed"].max()) + 1


def _job_seconds(runs: pd.DataFrame, keys: list[str], cell: tuple, seeds: int) -> float:
    """A job of ``seeds`` members of ``cell``: one run's time (the cell's stack time, its
    members' ``wall_time_s``, over its stack cost) times the stack cost of ``seeds``."""
    done = _cell_runs(runs, keys, cell)
    done = done[done["status"].eq("completed")]
    stack = len(done)
    one = done["wall_time_s"].mean() / (1 + (stack - 1) * STACK_COST)
    return float(one * (1 + (seeds - 1) * STACK_COST))
