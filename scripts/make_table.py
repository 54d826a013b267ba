"""Ablation tables and figures of a sweep: ``python scripts/make_table.py <sweep dir>
[<more dirs>] [--out DIR] [--metric token_acc] [--filter KEY=VALUE] [--wandb]``; ``--help``
lists the options (``pelab.analysis.report``). ``--baseline NAME`` (repeatable) tabulates the
runs beside a baseline's shipped records once their protocols agree; ``--save-baseline SWEEP_DIR
NAME`` ships a sweep's records as one (``baselines/``, ``pelab.analysis.baseline``)."""

import argparse
import sys

from pelab.analysis import baseline
from pelab.analysis.collect import load_records
from pelab.analysis.report import default_out, main, parse, tables_and_figures
from pelab.errors import ConfigError


def options() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False, usage=argparse.SUPPRESS)
    group = parser.add_argument_group("baselines (baselines/README.md)")
    group.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="NAME",
        help="put the runs beside the shipped runs of baselines/NAME (e.g. ablation_cpu) in one "
        "table; refused when their protocols differ",
    )
    group.add_argument(
        "--save-baseline",
        nargs=2,
        metavar=("SWEEP_DIR", "NAME"),
        help="copy the results.json files of SWEEP_DIR into baselines/NAME (replacing it), "
        "machine paths made relative, and write nothing else",
    )
    return parser


def run(argv: list[str] | None = None) -> int:
    """``make_table.py``'s command line: ``report.main``, with the baseline options."""
    extra, rest = options().parse_known_args(argv)
    if {"-h", "--help"} & set(rest):
        options().print_help()
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
    return main(rest)


def compare(argv: list[str], names: list[str]) -> int:
    """The tables of the training runs of ``argv``'s sources (``--filter`` selects among them)
    beside those of the baselines ``names``, in ``--out`` (default: beside the first source)."""
    args = parse(argv)
    records = load_records(args.sources, dict(args.filter))
    if not records:
        raise ConfigError(f"no training runs (results.json) under {' '.join(args.sources)}")
    shipped = [r for name in names for r in baseline.check(records, name)]
    out = args.out or default_out(args.sources[0])
    written = tables_and_figures([*records, *shipped], out, args)
    print(f"{len(written)} files written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(run())
