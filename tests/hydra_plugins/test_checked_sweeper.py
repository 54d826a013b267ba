"""The default sweeper (``hydra/sweeper=checked``): every job composed and checked before the
first runs; a sweep with a bad job is refused, one line per bad job, and leaves nothing."""

from __future__ import annotations

import copy

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.plugins import Plugins
from hydra.types import HydraContext

from pelab.analysis.sweep_grid import sweep_jobs
from pelab.config_files import preset_grid
from pelab.errors import ConfigError
from tests.conftest import CONFIG_DIR, TINY


class RecordingLauncher:
    """A launcher that runs nothing and keeps the batches it was given."""

    def __init__(self) -> None:
        self.batches: list[list[list[str]]] = []

    def launch(self, job_overrides, initial_job_idx):
        self.batches.append([list(o) for o in job_overrides])
        return []


def sweeper(tmp_path, *overrides: str):
    """The sweeper of ``scripts/train.py -m <overrides>``, as Hydra sets it up (the sweep
    directory inside ``tmp_path``), with a ``RecordingLauncher``. Hydra passes every
    command-line override to ``sweep`` again: each job is composed from them."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        config = compose(
            "train",
            [*overrides, f"hydra.sweep.dir={tmp_path / 'sweep'}"],
            return_hydra_config=True,
        )
        loader = GlobalHydra.instance().hydra.config_loader
    HydraConfig.instance().set_config(config)
    checked = Plugins.instance().instantiate_sweeper(
        config=config, hydra_context=HydraContext(loader, None), task_function=pytest.fail
    )
    assert type(checked).__name__ == "CheckedSweeper"  # train.yaml's default
    checked.launcher = RecordingLauncher()
    return checked


def test_a_sweep_with_bad_jobs_is_refused_one_line_per_bad_job_before_anything(tmp_path):
    checked = sweeper(tmp_path)
    with pytest.raises(ConfigError) as refused:
        checked.sweep([*TINY, "model.net.n_heads=2,5", "pe=rope,rop", "logger=csv"])
    lines = str(refused.value).splitlines()
    assert lines[0] == "3 of 4 jobs of this sweep are refused, so none ran:"
    assert lines[1].startswith("  #1 model.net.n_heads=2 pe=rop: pe=rop is not an option of pe")
    assert lines[2].startswith(
        "  #2 model.net.n_heads=5 pe=rope: model.net.d_model=16 is not divisible by "
        "model.net.n_heads=5"
    )
    assert lines[3].startswith("  #3 model.net.n_heads=5 pe=rop: pe=rop is not an option")
    assert len(lines) == 4
    assert checked.launcher.batches == []  # no job launched
    assert not (tmp_path / "sweep").exists()  # no directory left behind


def test_a_sweep_of_good_jobs_is_launched_as_hydras_basic_sweeper_launches_it(tmp_path):
    checked = sweeper(tmp_path)
    checked.sweep([*TINY, "pe=none,alibi", "logger=csv"])
    assert checked.launcher.batches == [
        [[*TINY, f"pe={pe}", "logger=csv"] for pe in ("none", "alibi")]
    ]
    assert (tmp_path / "sweep" / "multirun.yaml").exists()


def test_each_job_is_composed_once_the_launcher_reading_what_the_check_composed(
    tmp_path, monkeypatch
):
    """The check composes every job; the launcher's job directories (and its placement and
    sizing, through the same ``job_config``) read those compositions instead of composing
    again. A sweep of another config composes its own jobs."""
    from hydra_plugins.pelab_launcher.job_config import job_config, job_dir

    composed = []

    class DirectoryLauncher(RecordingLauncher):
        """Asks each job's directory, as the pool and submitit launchers do."""

        def launch(self, job_overrides, initial_job_idx):
            self.dirs = [
                job_dir(job_config(self.context, self.config, list(o), initial_job_idx + i))
                for i, o in enumerate(job_overrides)
            ]
            return super().launch(job_overrides, initial_job_idx)

    for sweep in ("a", "b"):
        checked = sweeper(tmp_path / sweep)
        loader = checked.hydra_context.config_loader
        compose_job = loader.load_sweep_config
        monkeypatch.setattr(
            loader, "load_sweep_config", lambda c, o, f=compose_job: composed.append(o) or f(c, o)
        )
        checked.launcher = DirectoryLauncher()
        checked.launcher.context, checked.launcher.config = checked.hydra_context, checked.config
        checked.sweep([*TINY, "pe=none,alibi", "logger=csv"])
        assert [d.parent for d in checked.launcher.dirs] == [tmp_path / sweep / "sweep"] * 2
        assert len(set(checked.launcher.dirs)) == 2
    assert [o[-2:] for o in composed] == [
        ["pe=none", "logger=csv"],
        ["pe=alibi", "logger=csv"],
    ] * 2


def test_a_config_read_once_composes_every_job_as_a_fresh_read(tmp_path, monkeypatch):
    """``configs_read_once``: each config file is read once for the whole sweep, and every job
    composes as with files read afresh (its whole config, Hydra's node included); outside it
    the sources read their files again."""
    from omegaconf import OmegaConf

    from hydra_plugins.pelab_launcher import job_config as jobs

    checked = sweeper(tmp_path)
    context, config = checked.hydra_context, checked.config
    grid = [
        [*TINY, f"pe={pe}", f"task={task}"]
        for pe in ("rope", "t5_bias")
        for task in ("copy", "sort")
    ]
    reads = []
    (files,) = {type(s) for s in context.config_loader.get_sources() if s.scheme() == "file"}
    read = files.load_config  # (Hydra's plugin scan may have loaded its module twice)
    monkeypatch.setattr(
        files,
        "load_config",
        lambda s, config_path: reads.append(config_path) or read(s, config_path),
    )

    def composed() -> list[str]:
        monkeypatch.setattr(jobs, "_SWEEP", {"config": None, "jobs": {}})
        return [
            OmegaConf.to_yaml(jobs.job_config(context, config, o, n)) for n, o in enumerate(grid)
        ]

    (schema,) = [s for s in context.config_loader.get_sources() if s.scheme() == "structured"]
    fresh = composed()
    assert len(reads) > len(set(reads))  # each job reads the files afresh
    reads.clear()
    with jobs.configs_read_once(context.config_loader):
        assert composed() == fresh
        assert copy.deepcopy(schema) is schema  # the repository's copies share Hydra's schema
    assert sorted(reads) == sorted(set(reads)) and "pe/t5_bias" in reads
    reads.clear()
    composed()
    assert len(reads) > len(set(reads))  # as before, outside it
    assert copy.deepcopy(schema) is not schema


def test_a_presets_grid_is_checked_as_the_sweeps_record_expands_it(tmp_path):
    """``experiment=ablation_cpu``: the jobs checked are those ``pelab.analysis.sweep_grid``
    expands from the sweep's ``multirun.yaml`` (the missing-run detection), and a grid key on
    the command line narrows them."""
    checked = sweeper(tmp_path, "experiment=ablation_cpu")
    command_line = list(checked.config.hydra.overrides.task)  # what Hydra passes to sweep
    jobs = checked.jobs(command_line)
    grid = preset_grid("ablation_cpu")  # every registered 1-D encoding x copy, reverse, sort
    assert len(jobs) == len(grid["pe"]) * len(grid["task"]) and jobs == sweep_jobs(checked.config)
    narrowed = checked.jobs([*command_line, "pe=rope,alibi"])
    assert sorted(narrowed) == [j for j in jobs if j[0] in ("pe=alibi", "pe=rope")]
