"""A sweep job's config as Hydra's launchers compose it, its directory, and the run's settings
in it: what the sweeper checks, the launchers size and place, and the worker runs."""

import contextlib
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hydra.core.config_loader import ConfigLoader
from hydra.plugins.config_source import ConfigResult
from hydra.types import HydraContext
from omegaconf import DictConfig, OmegaConf, open_dict

# The compositions of the sweep this process launches (its config, whose every job reads it;
# job number and overrides -> composed config): the checking sweeper composes each job, and the
# launcher (its job directories, placement and sizing) reads the same compositions instead of
# composing each job again (a composition takes ~0.35 s: 81 jobs of ``ablation_cpu``, ~30 s).
_SWEEP: dict[str, Any] = {"config": None, "jobs": {}}


def job_config(
    hydra_context: HydraContext, config: DictConfig, overrides: list[str], num: int
) -> DictConfig:
    """Job ``num``'s config, as Hydra's launchers make it: the sweep's config with the job's
    overrides, and its ``hydra.job.id`` and ``hydra.job.num`` (a job directory may use them).
    Composed once per job of the sweep whose config is ``config`` (``_SWEEP``); callers read
    it and copy before they change it (``run_config``)."""
    if _SWEEP["config"] is not config:  # another sweep: this one's jobs only
        _SWEEP.update(config=config, jobs={})
    key = (num, tuple(overrides))
    if key not in _SWEEP["jobs"]:
        sweep_config = hydra_context.config_loader.load_sweep_config(config, overrides)
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = f"{sweep_config.hydra.job.name}_{num}"
            sweep_config.hydra.job.num = num
        _SWEEP["jobs"][key] = sweep_config
    return _SWEEP["jobs"][key]


# the sources that read config files: a directory (``configs/``) and a package (Hydra's own);
# by scheme, as Hydra's plugin scan may load their classes' module twice
READ_ONCE_SCHEMES = ("file", "pkg")


@contextlib.contextmanager
def configs_read_once(
    config_loader: ConfigLoader, read: dict[tuple[str, str], dict[str, bytes]] | None = None
) -> Iterator[None]:
    """Within it, each config file of ``config_loader``'s sources (``configs/`` and Hydra's own)
    is read once (its YAML parsed and made a config), and every composition gets an unpickled
    copy of what was read, as Hydra's loader changes what it loads: a sweep's jobs read the same
    files, and reading them was a third of a composition. A file is read as it is when the
    sweep composes its first job. Structured configs (Hydra's schema) are read as before, but
    their source is no longer deep-copied with the repository that each composition copies (it
    holds Hydra's whole ``ConfigStore``, 8 ms a copy, and a composition only reads it).
    ``read``: what was read, by source (scheme, path) and file, kept by a caller whose loaders
    read the same unchanging files one after another (a test session); by default, this
    block's own."""
    read = {} if read is None else read
    sources = [s for s in config_loader.get_sources() if s.scheme() in READ_ONCE_SCHEMES]
    schemas = [s for s in config_loader.get_sources() if s.scheme() == "structured"]
    for schema in schemas:
        schema.__deepcopy__ = lambda memo, schema=schema: schema  # copy.deepcopy asks the object
    for source in sources:
        files = read.setdefault((source.scheme(), source.path), {})

        def load_config(config_path: str, source=source, files=files) -> ConfigResult:
            if config_path not in files:
                files[config_path] = pickle.dumps(type(source).load_config(source, config_path))
            return pickle.loads(files[config_path])

        source.load_config = load_config  # a copy of the repository shares it
    try:
        yield
    finally:
        for source in sources:
            del source.load_config  # the class's own again
        for schema in schemas:
            del schema.__deepcopy__


def job_dir(config: DictConfig) -> Path:
    """The directory of the job whose composed config is ``config`` (``job_config``)."""
    sweep = OmegaConf.select(config, "hydra.sweep")
    return Path(str(sweep.dir)) / str(sweep.subdir)


def run_config(config: DictConfig, output_dir: Path) -> DictConfig:
    """The run's settings (Hydra's node removed) of a job's composed config, with the output
    directory it will have: what the job's run checks, measures and builds. Call it with
    ``HydraConfig`` set to ``config`` so that ``${hydra:...}`` resolves as in the job."""
    cfg = config.copy()
    with open_dict(cfg):
        cfg.paths.output_dir = str(output_dir)
        del cfg["hydra"]
    return cfg
