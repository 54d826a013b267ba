"""Re-evaluate a checkpoint: ``python scripts/eval.py ckpt_path=<run dir>/checkpoints/best.ckpt
pe.scaling=yarn pe.scaling_factor=4 task.eval_lengths=[16,64,128]``."""

import hydra
from omegaconf import DictConfig

from pelab.evaluate import evaluate


@hydra.main(version_base="1.3", config_path="../configs", config_name="eval")
def main(cfg: DictConfig) -> None:
    evaluate(cfg)


if __name__ == "__main__":
    main()
