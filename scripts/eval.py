"""Re-evaluate a checkpoint: ``python scripts/eval.py ckpt_path=<run dir>/checkpoints/best.ckpt
pe.scaling=yarn pe.scaling_factor=4 task.eval_lengths=[16,64,128]``; sweep with ``-m``
(``pe.scaling=none,linear,yarn``): a failing job is recorded and the sweep goes on."""

import hydra
from omegaconf import DictConfig

from pelab import cli
from pelab.evaluate import job


@hydra.main(version_base="1.3", config_path="../configs", config_name="eval")
def main(cfg: DictConfig) -> None:
    job(cfg)


if __name__ == "__main__":
    cli.run_script(main)
