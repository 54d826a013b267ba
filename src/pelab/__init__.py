"""pelab: compare positional encodings of Transformers on toy tasks."""

from omegaconf import OmegaConf

from pelab.utils.wandb_mode import wandb_mode

OmegaConf.register_new_resolver("wandb_mode", wandb_mode, replace=True)

__version__ = "0.1.0"
