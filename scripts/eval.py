"""Re-evaluate a checkpoint: ``python scripts/eval.py ckpt_path=<run dir>/checkpoints/best.ckpt
pe.scaling=yarn pe.scaling_factor=4 task.eval_lengths=[8,16,64,128]``; sweep with ``-m``
(``pe.scaling=none,linear,yarn``): a failing job is recorded and the sweep goes on."""

import hydra
from omegaconf import DictConfig

from pelab import cli, config_files  # noqa: F401 (config_files: eval.yaml's eval_pe_options)


@hydra.main(version_base="1.3", config_path="../configs", config_name="eval")
def main(cfg: DictConfig) -> None:
    from pelab import evaluate  # here, not above: --help, --cfg and a bad override answer
    # before torch and Lightning load (issue 35, item 9)

    evaluate.main(cfg)


if __name__ == "__main__":
    cli.run_script(main)
