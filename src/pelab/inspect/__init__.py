"""Drawing an encoding: ``inspect_pe`` (``scripts/inspect_pe.py``) builds an encoding, untrained
or from a run's checkpoint, and measures what each hook adds; ``pe_figures`` draws those
tensors. The one package besides training that builds models: ``pelab.analysis`` reads results
only. ``inspect_dir`` (the resolver ``${inspect_dir:...}`` of ``configs/inspect.yaml``) places a
trained run's figures in that run's own directory."""

from pathlib import Path

from omegaconf import OmegaConf


def inspect_dir(ckpt_path: str | None, default: str) -> str:
    """``<run dir>/inspect`` for a checkpoint ``<run dir>/checkpoints/<name>.ckpt`` or a run
    directory (its best checkpoint; a checkpoint elsewhere: ``inspect/`` beside it), else
    ``default``: the figures of a trained model belong to its run, so two checkpoints never
    overwrite each other's figures."""
    if not ckpt_path:
        return default
    if Path(ckpt_path).is_dir():
        return str(Path(ckpt_path) / "inspect")
    folder = Path(ckpt_path).parent
    run_dir = folder.parent if folder.name == "checkpoints" else folder
    return str(run_dir / "inspect")


OmegaConf.register_new_resolver("inspect_dir", inspect_dir, replace=True)
