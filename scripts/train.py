"""Train one model: ``python scripts/train.py pe=rope task=copy``; sweep with ``-m``.

A single run that fails exits with status 1 and its error. In a sweep (``-m``) a failing job is
recorded and the sweep goes on (``pelab.hydra_job.sweep_task``); at the end
``pelab.analysis.sweep.SweepSummary`` lists every job that did not complete and the sweep exits
with status 1.
"""

from pelab.reliability.cluster import requeue

requeue.install()  # SLURM's requeue signal, handled from the job's first line (issue 29)

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from pelab import cli  # noqa: E402


@hydra.main(version_base="1.3", config_path="../configs", config_name="train")
def main(cfg: DictConfig) -> None:
    from pelab import train  # here, not above: --help, --cfg and a bad override answer
    # before torch and Lightning load (issue 35, item 9)

    train.main(cfg)


if __name__ == "__main__":
    cli.run_script(main)
