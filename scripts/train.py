"""Train one model: ``python scripts/train.py pe=rope task=copy``; sweep with ``-m``.

A single run that fails exits with status 1 and its error. In a sweep (``-m``) a failing job is
recorded (its ``results.json`` says ``failed`` and why, its log has the traceback) and the
sweep goes on; at the end ``pelab.analysis.sweep.SweepSummary`` lists every job that did not
complete and the sweep exits with status 1.
"""

import logging
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from pelab.train import run

log = logging.getLogger("pelab.train")


@hydra.main(version_base="1.3", config_path="../configs", config_name="train")
def main(cfg: DictConfig) -> None:
    try:
        run(cfg)
    except Exception:
        if HydraConfig.get().mode != RunMode.MULTIRUN:
            raise
        results = Path(cfg.paths.output_dir) / "results.json"
        log.exception("this job failed (recorded in %s); the sweep goes on", results)


if __name__ == "__main__":
    main()
