"""Train one model: ``python scripts/train.py pe=rope task=copy`` (add ``-m`` to sweep)."""

import hydra
from omegaconf import DictConfig

from pelab.train import run


@hydra.main(version_base="1.3", config_path="../configs", config_name="train")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
