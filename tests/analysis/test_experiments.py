"""The table experiments: their grids are every registered 1-D encoding (a glob over configs/pe/,
expanded as Hydra's sweeper and the missing-job detection of ``pelab.analysis.sweep_grid`` expand
it), they compose job by job, and their W&B sweep configs are that grid written out."""

import logging
import math
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from pelab.analysis import wandb_sweep
from pelab.analysis.collect import directory_records
from pelab.analysis.sweep_grid import sweep_jobs
from pelab.pe import PE_REGISTRY
from tests.conftest import CONFIG_DIR, compose_config
from tests.test_configs import options

ABLATIONS = ["ablation_cpu", "ablation_gpu"]
# the registry's encodings that read 1-D positions, in Hydra's glob order (sorted), but those that
# index digits (abacus), which the grids' tasks have none of
FLAT = sorted(
    pe
    for pe, cls in PE_REGISTRY.items()
    if cls.position_dims in (None, 1) and not cls.needs_digit_tokens
)
GRID_PE = "glob(*,exclude=[*_2d,abacus])"


def composed(*overrides: str) -> DictConfig:
    """``configs/train.yaml`` with its ``hydra`` node: what a sweep saves as ``multirun.yaml``."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=list(overrides), return_hydra_config=True)
    GlobalHydra.instance().clear()
    return cfg


def hydra_config(*overrides: str) -> DictConfig:
    return composed(*overrides).hydra


def grid(experiment: str) -> dict[str, list[str]]:
    """The values of each swept key over the jobs of ``experiment=<experiment>``, in job order."""
    values: dict[str, list[str]] = {}
    for job in sweep_jobs(composed(f"experiment={experiment}")):
        for override in job:
            key, value = override.split("=", 1)
            if key != "experiment" and value not in values.setdefault(key, []):
                values[key].append(value)
    return values


@pytest.mark.parametrize("experiment", ABLATIONS)
def test_an_ablation_runs_every_encoding_that_reads_1d_positions(experiment):
    jobs = sweep_jobs(composed(f"experiment={experiment}"))
    params = grid(experiment)
    assert params["pe"] == FLAT
    assert set(params["task"]) <= set(options("task"))
    assert "seed" not in params  # the seeds are each job's members (pelab.members)
    assert len(composed(f"experiment={experiment}").seeds) >= 3
    assert (
        len({frozenset(job) for job in jobs}) == len(jobs) == math.prod(map(len, params.values()))
    )


def test_the_ablation_grids_are_a_glob_over_the_encoding_configs():
    """No hand-kept list: a new 1-D encoding joins both ablations by its config file alone."""
    for experiment in ABLATIONS:
        params = OmegaConf.load(f"{CONFIG_DIR}/experiment/{experiment}.yaml").hydra.sweeper.params
        assert params.pe == GRID_PE


def test_missing_jobs_of_a_glob_sweep_come_from_its_saved_config_tree(tmp_path):
    """``multirun.yaml`` as Hydra saves it keeps ``pe: glob(...)`` and the config sources; the
    jobs of a sweep that never started are every 1-D encoding x task x seed, all missing."""
    multirun = composed("experiment=ablation_cpu", "seeds=[0,5]")
    OmegaConf.save(multirun, tmp_path / "multirun.yaml")
    records = directory_records(tmp_path)
    assert {r["status"] for r in records} == {"missing"}
    assert sorted({r["choices"]["pe"] for r in records}) == FLAT
    assert len(records) == len(FLAT) * 3 * 2  # copy, reverse and sort; the command line's seeds
    assert sorted({r["choices"]["seed"] for r in records}) == [0, 5]


def test_a_glob_sweep_whose_config_tree_is_gone_warns_and_detects_no_missing_job(tmp_path, caplog):
    multirun = composed("experiment=ablation_cpu")
    for source in multirun.hydra.runtime.config_sources:
        if source.schema == "file":
            source.path = str(tmp_path / "moved")
    OmegaConf.save(multirun, tmp_path / "multirun.yaml")
    with caplog.at_level(logging.WARNING):
        assert directory_records(tmp_path) == []
    assert f"pe={GRID_PE} matches no config" in caplog.text
    assert str(tmp_path / "moved") in caplog.text


@pytest.mark.parametrize("experiment", ABLATIONS)
def test_an_ablation_job_composes_with_the_protocol_and_the_parallel_or_gpu_setup(experiment):
    cfg = compose_config([f"experiment={experiment}", "pe=alibi", "task=sort", "seed=1"])
    assert (cfg.run_name, cfg.seed) == (experiment, 1)
    assert cfg.task._target_.endswith("SortTask")
    assert cfg.task.train_lengths[1] < max(cfg.task.eval_lengths)  # tested beyond training
    if experiment == "ablation_cpu":
        assert cfg.trainer.accelerator == "cpu"
    else:
        assert cfg.trainer.accelerator == "gpu"


def test_the_cpu_ablation_is_a_sweep_run_in_parallel_one_job_per_core():
    hydra = hydra_config("experiment=ablation_cpu")
    assert str(hydra.mode) == "RunMode.MULTIRUN"
    assert hydra.launcher._target_.endswith("PoolLauncher")
    assert hydra.launcher.n_jobs == -1


@pytest.mark.parametrize(
    ("launcher", "target"),
    [("parallel", "PoolLauncher"), ("slurm", "SlurmLauncher"), ("local", "LocalLauncher")],
)
def test_every_launcher_option_composes_onto_hydras_plugin(launcher, target):
    hydra = hydra_config(f"hydra/launcher={launcher}")
    assert hydra.launcher._target_.endswith(target)
    if launcher in ("slurm", "local"):  # pelab's (issue 29): it waits for every job
        assert hydra.launcher._target_.startswith("hydra_plugins.pelab_launcher.")
    if launcher == "slurm":  # null: the resources follow the run (pelab.reliability.cluster.slurm)
        assert hydra.launcher.gpus_per_node is None and hydra.launcher.timeout_min > 0


def test_slurm_sends_the_requeue_signal_that_pelab_checkpoints_on(tmp_path):
    """The sbatch script submitit writes for hydra/launcher=slurm asks SLURM for the signal that
    callbacks.requeue_at_step_end (and Lightning's requeue handler) answer, not submitit's."""
    from submitit.slurm.slurm import _make_sbatch_string

    launcher = hydra_config("hydra/launcher=slurm").launcher
    script = _make_sbatch_string(
        command="python -m job",
        folder=str(tmp_path),
        signal_delay_s=launcher.signal_delay_s,
        additional_parameters=dict(launcher.additional_parameters),
    )
    signal_lines = [line for line in script.splitlines() if "--signal" in line]
    callback = compose_config([]).callbacks.requeue_at_step_end
    assert signal_lines == [f"#SBATCH --signal={callback.signum.removeprefix('SIG')}@90"]


def test_the_wandb_sweep_of_an_experiment_is_its_grid_written_out(tmp_path, capsys):
    """W&B reads literal values: the sweep config is generated from the grid Hydra expands from
    the registry, so a new encoding joins it by its config file alone."""
    out = tmp_path / "sweep.yaml"
    assert wandb_sweep.main(CONFIG_DIR, ["ablation_cpu", "--out", str(out)]) == 0
    sweep = yaml.safe_load(out.read_text())
    params = sweep["parameters"]
    assert params["experiment"] == {"value": "ablation_cpu"}
    expected = grid("ablation_cpu")
    assert expected["pe"] == FLAT
    assert {k: v["values"] for k, v in params.items() if k != "experiment"} == expected
    assert sweep["method"] == "grid" and sweep["program"] == "scripts/train.py"
    assert sweep["command"][-1] == "${args_no_hyphens}"  # W&B passes key=value, no dashes
    jobs = math.prod(len(v) for v in expected.values())
    assert f"({jobs} jobs)" in capsys.readouterr().out


def test_an_experiment_without_a_grid_or_unknown_is_refused(capsys):
    assert wandb_sweep.main(CONFIG_DIR, ["copy_extrapolation"]) == 2
    assert "sweeps nothing" in capsys.readouterr().err
    assert wandb_sweep.main(CONFIG_DIR, ["no_such_experiment"]) == 2
    assert "no_such_experiment" in capsys.readouterr().err


GPU_PRESETS = sorted(
    p.stem
    for p in (Path(CONFIG_DIR) / "experiment").glob("*.yaml")
    if "override /trainer: gpu" in p.read_text()
)


@pytest.mark.parametrize("preset", GPU_PRESETS)
def test_a_gpu_preset_fills_the_node_with_the_parallel_launcher_unless_told_otherwise(preset):
    """Issue 43: a GPU preset's grid runs on every GPU of the node (``hydra/launcher=parallel``
    places its jobs by free memory), not one job after another in one process; a launcher on
    the command line (SLURM) still wins."""
    assert len(GPU_PRESETS) >= 3
    launcher = hydra_config(f"experiment={preset}").launcher._target_
    assert launcher.endswith("pool_launcher.PoolLauncher")
    slurm = hydra_config(f"experiment={preset}", "hydra/launcher=slurm").launcher._target_
    assert slurm.endswith("submitit_launcher.SlurmLauncher")


def test_the_length_extrapolation_preset_trains_on_the_lengths_its_docs_state():
    """README and the preset's own comments: train 1-16, test up to 64 (issue 45: the config
    trained on 1-8, so a paper citing the preset would have stated the wrong range)."""
    task = compose_config(["experiment=copy_extrapolation"]).task
    assert list(task.train_lengths) == [1, 16] and max(task.eval_lengths) == 64
