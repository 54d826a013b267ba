"""Ablation tables and figures of a sweep: ``python scripts/make_table.py <sweep dir>``.

Sources: directories (a sweep directory, ``logs/``, any tree of ``results.json`` files) or
``wandb:<entity>/<project>`` (online; ``--filter group=<W&B group>`` keeps one sweep, as do
``--filter sweep=<W&B sweep id>`` or ``--filter config.run_name=ablation_cpu``). Directories take
``--filter`` too (``pe=rope``, ``task=copy``, ``tag=cpu``, ``group=<sweep>``, ``config.<key>=..``;
``collect.matches``), so ``make_table.py logs --filter task=copy`` tabulates every copy run, and
``make_table.py logs --list`` lists the runs, one line per job (``pelab.analysis.browse``).
Written to ``--out`` (default ``<first directory>/summary``;
``logs/summary/<entity>_<project>`` for W&B):

- ``table_tasks.{md,tex,csv}``: encodings x tasks, in- and out-of-distribution, exact match
  and token accuracy side by side (``--metric`` first); ``table_tasks.<metric>.{md,tex,csv}``:
  each metric alone;
- ``table_lengths.{md,tex,csv}``, ``table_lengths.<metric>.{md,tex,csv}``: encodings x
  evaluation lengths, the same way;
- ``table_steps.{md,csv}``: steps to learn, encodings x tasks (runs with ``learned_at`` only);
- per metric, ``length_curves.<metric>.{png,pdf}`` (``--published <csv>`` overlays published
  numbers of ``--metric`` on its curves: columns pe, task, length, value, source) and
  ``heatmap.<metric>.{png,pdf}`` (encodings x lengths, coloured against the chance level);
- with ``--reference pe=rope``, ``table_vs_rope.{md,tex,csv}``: the rows of the declared family
  (``--compare``, else your rows beside a baseline, else every row) against it
  (``pelab.analysis.reference``; ``--filter pe=...`` narrows the rows shown, not the family);
- ``report.html``: all of it in one self-contained file, with the runs that did not complete or
  did not learn, the looks that added seeds, every job's command and the versions and code
  (``pelab.analysis.html_report``); ``make_table.json``: the call and its files (``summary``);
- the same for the re-evaluations found (``scripts/eval.py``) in ``eval/``: one row per
  training setting and evaluation setting (e.g. ``pe.scaling``), with their chance levels;

and, with ``--wandb``, logged as one W&B run (``job_type=summary``, the runs' project and group;
offline unless you are logged in; ``pelab.analysis.wandb_summary``). Prints the task table
(every metric side by side).

``--baseline NAME`` (repeatable) tabulates the runs beside a baseline's shipped records once
their protocols agree; ``--save-baseline SWEEP_DIR NAME`` ships a sweep's records as one
(``baselines/``, ``pelab.analysis.baseline``).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from pelab.analysis import add_seeds, baseline, looks, reference, reference_tables, summary
from pelab.analysis.browse import run_list
from pelab.analysis.collect import (
    WANDB_PREFIX,
    load_records,
    matches,
    merged_filters,
)
from pelab.analysis.frames import lengths_frame, runs_frame
from pelab.analysis.html_report import write_html
from pelab.analysis.plots import heatmap, length_curves, read_published, save
from pelab.analysis.render import write_tables
from pelab.analysis.report_options import baseline_options, default_out, parse
from pelab.analysis.table import ablation
from pelab.analysis.wandb_summary import log_summary
from pelab.errors import ConfigError

DISPLAYED = ("pe",)  # --filter keys that narrow the rows shown, not the runs compared


def main(argv: list[str] | None = None) -> int:
    """The command line of ``scripts/make_table.py`` (``argv``: its arguments, default
    ``sys.argv[1:]``): ``--save-baseline``, else the tables beside ``--baseline``'s (``compare``),
    else the tables (``tabulate``). Returns the exit status: 0, or 2 when no run was found or a
    baseline was refused."""
    extra, rest = baseline_options().parse_known_args(argv)
    try:
        if extra.save_baseline:
            sweep, name = extra.save_baseline
            written = baseline.save(sweep, name)
            print(f"{len(written)} records written to {baseline.BASELINES / name}")
            return 0
        if extra.baseline:
            return compare(rest, extra.baseline, command(argv))
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return tabulate(rest, command(argv))


def compare(argv: list[str], names: list[str], call: str = "") -> int:
    """The tables of the training runs of ``argv``'s sources (``--filter`` selects among them)
    beside those of the baselines ``names``, in ``--out`` (default: beside the first source);
    with ``--add-seeds``, the seeds that would decide instead (no table)."""
    args = parse(argv)
    check_add_seeds(args)
    shown, selecting = display_filters(merged_filters(args.filter))
    records = load_records(args.sources, selecting)
    if not records:
        raise ConfigError(
            f"no training runs (results.json) under {' '.join(args.sources)}" + filtered(selecting)
        )
    # the baseline's runs of your tasks, narrowed by --filter as yours are
    tasks = {str((r.get("choices") or {}).get("task")) for r in records}
    shipped = [
        r
        for name in names
        for r in baseline.check(records, name)
        if str((r.get("choices") or {}).get("task")) in tasks and matches(r, selecting)
    ]
    if args.add_seeds:
        return add_seeds_to([*records, *shipped], args, shown)
    out = args.out or default_out(args.sources[0])
    written = tables_and_figures([*records, *shipped], out, args, shown)
    summary.claim(out, call, written)
    print(f"{len(written)} files written to {out}")
    return 0


def command(argv: list[str] | None) -> str:
    """The call as a shell line: ``make_table.py <its arguments>``."""
    return shlex.join(["make_table.py", *(sys.argv[1:] if argv is None else argv)])


def display_filters(filters: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``--filter``'s rows shown (``pe``: ``DISPLAYED``) and the runs selected (every other
    key): a comparison is made over the rows before the first narrows them, so hiding rows
    changes no verdict (``reference``)."""
    shown = {k: v for k, v in filters.items() if k in DISPLAYED}
    return shown, {k: v for k, v in filters.items() if k not in DISPLAYED}


def tabulate(argv: list[str], call: str = "") -> int:
    """The tables and figures of ``argv``'s sources (or, with ``--list``, their run list): the
    training runs' in ``--out``, the re-evaluations' in ``<out>/eval``; 2 when no run was
    found."""
    args = parse(argv)
    try:
        check_add_seeds(args)
        if args.published:
            read_published(args.published)  # a bad file fails before any work
        filters = merged_filters(args.filter)
        shown, selecting = display_filters(filters)
        records = load_records(args.sources, selecting)
        evaluations = load_records(args.sources, filters, job_type="eval")
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not [r for r in records if matches(r, shown)] and not evaluations:
        where = " ".join(args.sources)
        print(f"error: no runs (results.json) under {where}{filtered(filters)}", file=sys.stderr)
        return 2
    if args.list:
        print(run_list([r for r in records if matches(r, shown)]))
        return 0
    try:
        if args.add_seeds:
            return add_seeds_to(records, args, shown)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    out = args.out or default_out(args.sources[0])
    written = []
    for found, where, display in ((records, out, shown), (evaluations, out / "eval", {})):
        if [r for r in found if matches(r, display)]:
            written += tables_and_figures(found, where, args, display)
    summary.claim(out, call, written)
    print(f"{len(written)} files written to {out}")
    return 0


def filtered(filters: dict[str, str]) -> str:
    """What an empty selection says of its ``--filter``s (nothing without any)."""
    if not filters:
        return ""
    given = " ".join(f"--filter {k}={v}" for k, v in filters.items())
    return f" match {given} (without it: make_table.py <dirs> --list shows what is there)"


def add_seeds_to(records: list[dict], args: argparse.Namespace, shown: dict[str, str]) -> int:
    """``--add-seeds``: the plan, printed (and with ``--run`` run), the look recorded; no table
    is written. With ``--reference`` it decides the reference comparisons of the declared
    family, else the comparisons with each column's best; either narrowed to the rows
    ``shown`` (``--filter pe=...``). 1 when a job failed."""
    check_add_seeds(args)
    budget = add_seeds.parse_budget(args.budget)
    split = None if args.split == "all" else args.split
    whole = ablation(runs_frame(records), lengths_frame(records), args.metric, args.protocol)
    if args.reference:
        compared, _, _ = reference.comparisons(whole, args.reference, args.compare, shown)
        targets = add_seeds.reference_targets(compared, whole.rows, whole.metric, split)
        result = whole
    else:
        visible = [r for r in records if matches(r, shown)]
        result = ablation(runs_frame(visible), lengths_frame(visible), args.metric)
        targets = add_seeds.best_targets(result, split)
    additions = add_seeds.place(add_seeds.plan(result, targets, budget), args.sources[0])
    commands = add_seeds.commands(result, additions)
    print(add_seeds.report(additions, commands, budget))
    if not commands:
        return 0
    chosen = {name for a in additions for name in a.decides}
    seen = [
        {"comparison": t.name, "p": t.seen, "look_seeds": t.seeds}
        for t in targets
        if t.name in chosen
    ]
    for sweep_dir in dict.fromkeys(a.sweep_dir.parent for a in additions):
        added = [
            {"settings": a.settings, "seeds": a.seeds, "sweep_dir": a.sweep_dir.name}
            for a in additions
            if a.sweep_dir.parent == sweep_dir
        ]
        path = looks.append(sweep_dir, looks.entry(args.metric, args.split, seen, added))
        print(f"--add-seeds: the look is recorded in {path}")
    if not args.run:
        return 0
    failed = add_seeds.run(commands, Path(__file__).resolve().parents[3])
    for sweep_dir in dict.fromkeys(a.sweep_dir for a in additions):
        if baseline.origin(sweep_dir) != baseline.YOURS:  # into a shipped baseline: records only
            print(f"--add-seeds: {add_seeds.ship(sweep_dir)} records kept in {sweep_dir}")
    print(
        f"--add-seeds: {len(commands) - failed} of {len(commands)} jobs ran; then: "
        f"make_table.py {' '.join(args.sources)}"
    )
    return 1 if failed else 0


def check_add_seeds(args: argparse.Namespace) -> None:
    """``--add-seeds``'s combinations it cannot do, refused in one line before any work."""
    if not args.add_seeds:
        return
    if any(str(s).startswith(WANDB_PREFIX) for s in args.sources):
        raise ConfigError("--add-seeds: seeds are added to run directories, not to a W&B project")
    if args.protocol != "mean":
        raise ConfigError(
            f"--add-seeds with --protocol {args.protocol}: it plans seeds for the mean over "
            "seeds only (a selection over seeds or learning rates changes with every seed)"
        )
    if args.compare and not args.reference:
        raise ConfigError("--compare names a --reference's family: give --reference too")
    add_seeds.parse_budget(args.budget)


def tables_and_figures(
    records: list[dict], out: Path, args: argparse.Namespace, shown: dict[str, str]
) -> list[Path]:
    """The tables and figures of ``records`` (all of one job type) in ``out``, of the rows
    ``shown``, logged to W&B with ``--wandb``; prints the task table with every metric side by
    side. ``--reference``'s comparisons are made over every row of ``records``."""
    visible = [r for r in records if matches(r, shown)]
    try:
        result = ablation(runs_frame(visible), lengths_frame(visible), args.metric, args.protocol)
        whole = (
            result
            if len(visible) == len(records)
            else ablation(runs_frame(records), lengths_frame(records), args.metric, args.protocol)
        )
        compared = (
            reference.comparisons(whole, args.reference, args.compare, shown)
            if args.reference
            else None
        )
    except ConfigError as error:
        raise SystemExit(f"error: {error}") from None
    recorded = looks.found([s for s in args.sources if not str(s).startswith(WANDB_PREFIX)])
    recorded += looks.found(sorted({baseline.BASELINES / o for o in origins(records)}))
    written = write_tables(result, out, looks.lines(recorded), args.tex_span, dict(args.label))
    versus = None
    if compared is not None:
        table, wanted, family = compared
        written += reference_tables.write(
            table, whole.rows, wanted, result.metric, out, family, args.tex_span, dict(args.label)
        )
        mine = table[table["metric"] == result.metric]
        decided, tested = int(mine["decided"].sum()), int(mine["diff"].notna().sum())
        print(f"against {args.reference}: {decided} of {tested} comparisons decided ({family})")
        versus = (mine, whole.rows, wanted, family)
    published = read_published(args.published) if args.published else None
    figures = []
    for metric in result.metrics:  # published numbers are of --metric, the first
        overlay = published if metric == result.metric else None
        renames = dict(args.label)
        curves = length_curves(result.runs, result.lengths, result.rows, metric, overlay, renames)
        figures += save(curves, out / f"length_curves.{metric}")
    for metric in result.metrics:
        drawn = heatmap(result.by_length, result.rows, metric, dict(args.label))
        figures += save(drawn, out / f"heatmap.{metric}")
    page = write_html(result, records, figures, out, versus, looks.lines(recorded))
    if args.wandb:
        log_summary(result, records, out, figures)
    print((out / "table_tasks.md").read_text())
    return [*written, *figures, page]


def origins(records: list[dict]) -> set[str]:
    """The baselines the records come from."""
    return {o for r in records if (o := baseline.origin(r.get("source"))) != baseline.YOURS}
