"""Draw a positional encoding, untrained: ``python scripts/inspect_pe.py pe=rope [length=64]
[out_dir=...] [wandb=true]``; ``--help`` lists the keys (``pelab.inspect.inspect_pe``)."""

import hydra
from omegaconf import DictConfig

from pelab import cli, inspect  # noqa: F401 (inspect: the resolver inspect.yaml uses)


@hydra.main(version_base="1.3", config_path="../configs", config_name="inspect")
def main(cfg: DictConfig) -> None:
    from pelab.inspect.inspect_pe import run  # here, not above: --help, --cfg and a bad
    # override answer before torch loads (issue 35, item 9)

    run(cfg)


if __name__ == "__main__":
    cli.run_script(main)
