"""Any experiment as a W&B sweep: ``python scripts/wandb_sweep.py ablation_cpu`` writes the grid
of ``configs/experiment/ablation_cpu.yaml`` as a W&B sweep config, for ``wandb agent`` users.

W&B reads literal values, so the file is generated from the grid Hydra expands (a
``glob(*,exclude=[*_2d,abacus])`` over the encodings becomes every registered 1-D encoding but
abacus), never kept by hand: a new encoding joins the sweep by its config file alone. Each W&B
job runs ``python scripts/train.py experiment=<name> <key>=<value> ...``, a one-job sweep of the
experiment (its ``results.json`` under ``logs/<run_name>/`` as usual).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException

from pelab.analysis.sweep_grid import sweep_jobs
from pelab.errors import ConfigError

PROGRAM = "scripts/train.py"
METRIC = {"name": "test/ood/exact_match", "goal": "maximize"}
COMMAND = ["${env}", "${interpreter}", "${program}", "${args_no_hyphens}"]


def experiment_grid(experiment: str, config_dir: str | Path) -> dict[str, list[str]]:
    """The values of each key ``experiment=<experiment>`` sweeps, in Hydra's job order."""
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(Path(config_dir).resolve()), version_base="1.3"):
            cfg = compose("train", [f"experiment={experiment}"], return_hydra_config=True)
    except HydraException as error:
        raise ConfigError(f"cannot compose experiment={experiment}: {error}") from None
    finally:
        GlobalHydra.instance().clear()
    values: dict[str, list[str]] = {}
    for job in sweep_jobs(cfg):
        for override in job:
            key, value = override.split("=", 1)
            if key != "experiment" and value not in values.setdefault(key, []):
                values[key].append(value)
    if not values:
        raise ConfigError(f"experiment={experiment} sweeps nothing (no hydra.sweeper.params)")
    return values


def sweep_config(experiment: str, config_dir: str | Path) -> dict[str, Any]:
    """The W&B sweep config (``method: grid``) that runs the grid of ``experiment``."""
    grid = experiment_grid(experiment, config_dir)
    parameters: dict[str, Any] = {"experiment": {"value": experiment}}
    parameters |= {key: {"values": values} for key, values in grid.items()}
    return {
        "program": PROGRAM,
        "method": "grid",
        "metric": METRIC,
        "parameters": parameters,
        "command": COMMAND,
    }


def main(config_dir: str | Path, argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", help="a name in configs/experiment/, e.g. ablation_cpu")
    parser.add_argument(
        "--out", type=Path, help="file to write (default logs/wandb_sweeps/<experiment>.yaml)"
    )
    args = parser.parse_args(argv)
    out = args.out or Path("logs", "wandb_sweeps", f"{args.experiment}.yaml")
    try:
        config = sweep_config(args.experiment, config_dir)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(config, sort_keys=False))
    jobs = 1
    for values in config["parameters"].values():
        jobs *= len(values.get("values", [None]))
    print(f"wrote {out} ({jobs} jobs); register it with: wandb sweep --project pelab {out}")
    return 0
