"""pelab: compare positional encodings of Transformers on toy tasks."""

from omegaconf import OmegaConf

from pelab.record import job_key
from pelab.utils.wandb_mode import wandb_mode

OmegaConf.register_new_resolver("wandb_mode", wandb_mode, replace=True)
# a job's seeds in directory names: "0" (seed=0) or "0-1-2" (seeds=[0,1,2])
OmegaConf.register_new_resolver(
    "seeds_label",
    lambda seed, seeds=None: "-".join(map(str, seeds)) if seeds else str(seed),
    replace=True,
)

# a job's key in its sweep directory's names (pelab.record.job_key)
OmegaConf.register_new_resolver(
    "job_key", lambda overrides: job_key(list(overrides)), replace=True
)

__version__ = "0.1.0"


def __getattr__(name: str):  # noqa: ANN202 (lazy: ``import pelab`` stays light)
    """``pelab.load_run``: a trained run in Python (``pelab.load``)."""
    if name == "load_run":
        from pelab.load import load_run

        return load_run
    raise AttributeError(f"module 'pelab' has no attribute {name!r}")
