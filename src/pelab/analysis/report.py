"""Ablation tables and figures of a sweep: ``python scripts/make_table.py <sweep dir>``.

Sources: directories (a sweep directory, ``logs/``, any tree of ``results.json`` files) or
``wandb:<entity>/<project>`` (online; ``--filter group=<W&B group>`` keeps one sweep, as do
``--filter sweep=<W&B sweep id>`` or ``--filter config.run_name=ablation_cpu``). Directories take
``--filter`` too (``pe=rope``, ``task=copy``, ``tag=cpu``, ``group=<sweep>``, ``config.<key>=..``;
``collect.matches``), so ``make_table.py logs --filter task=copy`` tabulates every copy run, and
``make_table.py logs --list`` lists the runs, one line per job (``pelab.analysis.browse``).
Written to ``--out`` (default ``<first directory>/summary``; ``logs/summary/<project>`` for W&B):

- ``table_tasks.{md,tex,csv}``: encodings x tasks, in- and out-of-distribution, exact match
  and token accuracy side by side (``--metric`` first); ``table_tasks.<metric>.{md,tex,csv}``:
  each metric alone;
- ``table_lengths.{md,tex,csv}``, ``table_lengths.<metric>.{md,tex,csv}``: encodings x
  evaluation lengths, the same way;
- ``table_steps.{md,csv}``: steps to learn, encodings x tasks (runs with ``learned_at`` only);
- per metric, ``length_curves.<metric>.{png,pdf}`` (``--published <csv>`` overlays published
  numbers of ``--metric`` on its curves: columns pe, task, length, value, source) and
  ``heatmap.<metric>.{png,pdf}`` (encodings x lengths, coloured against the chance level);
- ``report.html``: all of it in one self-contained file, with the runs that did not complete or
  did not learn, every job's command and the versions (``pelab.analysis.html_report``);
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
import sys
from pathlib import Path

from pelab.analysis import add_seeds, baseline, reference
from pelab.analysis.browse import run_list
from pelab.analysis.collect import load_records, matches, merged_filters
from pelab.analysis.frames import lengths_frame, runs_frame
from pelab.analysis.html_report import write_html
from pelab.analysis.plots import heatmap, length_curves, read_published, save
from pelab.analysis.render import write_tables
from pelab.analysis.report_options import baseline_options, default_out, parse
from pelab.analysis.table import ablation
from pelab.analysis.wandb_summary import log_summary
from pelab.errors import ConfigError


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
            return compare(rest, extra.baseline)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return tabulate(rest)


def compare(argv: list[str], names: list[str]) -> int:
    """The tables of the training runs of ``argv``'s sources (``--filter`` selects among them)
    beside those of the baselines ``names``, in ``--out`` (default: beside the first source)."""
    args = parse(argv)
    filters = merged_filters(args.filter)
    records = load_records(args.sources, filters)
    if not records:
        raise ConfigError(
            f"no training runs (results.json) under {' '.join(args.sources)}" + filtered(filters)
        )
    # the baseline's runs of your tasks, narrowed by --filter as yours are
    tasks = {str((r.get("choices") or {}).get("task")) for r in records}
    shipped = [
        r
        for name in names
        for r in baseline.check(records, name)
        if str((r.get("choices") or {}).get("task")) in tasks and matches(r, filters)
    ]
    out = args.out or default_out(args.sources[0])
    written = tables_and_figures([*records, *shipped], out, args)
    print(f"{len(written)} files written to {out}")
    return 0


def tabulate(argv: list[str]) -> int:
    """The tables and figures of ``argv``'s sources (or, with ``--list``, their run list): the
    training runs' in ``--out``, the re-evaluations' in ``<out>/eval``; 2 when no run was
    found."""
    args = parse(argv)
    try:
        if args.published:
            read_published(args.published)  # a bad file fails before any work
        filters = merged_filters(args.filter)
        records = load_records(args.sources, filters)
        evaluations = load_records(args.sources, filters, job_type="eval")
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not records and not evaluations:
        where = " ".join(args.sources)
        print(f"error: no runs (results.json) under {where}{filtered(filters)}", file=sys.stderr)
        return 2
    if args.list:
        print(run_list(records))
        return 0
    if args.add_seeds:
        return add_seeds_to(records, args)
    out = args.out or default_out(args.sources[0])
    written = []
    for found, where in ((records, out), (evaluations, out / "eval")):
        if found:
            written += tables_and_figures(found, where, args)
    print(f"{len(written)} files written to {out}")
    return 0


def filtered(filters: dict[str, str]) -> str:
    """What an empty selection says of its ``--filter``s (nothing without any)."""
    if not filters:
        return ""
    given = " ".join(f"--filter {k}={v}" for k, v in filters.items())
    return f" match {given} (without it: make_table.py <dirs> --list shows what is there)"


def add_seeds_to(records: list[dict], args: argparse.Namespace) -> int:
    """``--add-seeds``: the plan, printed (and with ``--run`` run); 1 when a job failed."""
    try:
        budget = add_seeds.parse_budget(args.budget)
        result = ablation(runs_frame(records), lengths_frame(records), args.metric, args.protocol)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    additions = add_seeds.plan(result, budget, None if args.split == "all" else args.split)
    sweep_dir = add_seeds.default_sweep_dir(args.sources[0])
    commands = add_seeds.commands(result, additions, sweep_dir)
    print(add_seeds.report(additions, commands, budget))
    if not args.run or not commands:
        return 0
    failed = add_seeds.run(commands, Path(__file__).resolve().parents[3])
    if baseline.origin(sweep_dir) != baseline.YOURS:  # into a shipped baseline: records only
        print(f"--add-seeds: {add_seeds.ship(sweep_dir)} records kept in {sweep_dir}")
    print(
        f"--add-seeds: {len(commands) - failed} of {len(commands)} jobs ran; then: "
        f"make_table.py {' '.join(args.sources)}"
    )
    return 1 if failed else 0


def tables_and_figures(records: list[dict], out: Path, args: argparse.Namespace) -> list[Path]:
    """The tables and figures of ``records`` (all of one job type) in ``out``, logged to W&B with
    ``--wandb``; prints the task table with every metric side by side."""
    try:
        result = ablation(runs_frame(records), lengths_frame(records), args.metric, args.protocol)
    except ConfigError as error:
        raise SystemExit(f"error: {error}") from None
    written = write_tables(result, out)
    if args.reference:
        try:
            wanted = reference.parse_reference(args.reference, result.rows, result.by_task)
        except ConfigError as error:
            raise SystemExit(f"error: {error}") from None
        compared = reference.versus(result.by_task, result.rows, wanted)
        written += reference.write(compared, result.rows, wanted, result.metric, out)
        mine = compared[compared["metric"] == result.metric]
        decided, tested = int(mine["decided"].sum()), int(mine["diff"].notna().sum())
        print(f"against {args.reference}: {decided} of {tested} comparisons decided")
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
    page = write_html(result, records, figures, out)
    if args.wandb:
        log_summary(result, records, out, figures)
    print((out / "table_tasks.md").read_text())
    return [*written, *figures, page]
