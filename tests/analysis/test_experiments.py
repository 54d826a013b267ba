"""The table experiments: their grids cover every encoding, compose job by job, and the W&B sweep
file runs the same grid."""

from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from pelab.pe import PE_REGISTRY
from tests.conftest import CONFIG_DIR, compose_config
from tests.test_configs import options

ABLATIONS = ["ablation_cpu", "ablation_gpu"]


def grid(experiment: str) -> dict[str, list[str]]:
    """``hydra.sweeper.params`` of an experiment file, each value list expanded."""
    params = OmegaConf.load(f"{CONFIG_DIR}/experiment/{experiment}.yaml").hydra.sweeper.params
    parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()])
    return {o.key_or_group: [str(v) for v in o.sweep_string_iterator()] for o in parsed}


@pytest.mark.parametrize("experiment", ABLATIONS)
def test_an_ablation_runs_every_encoding_that_reads_1d_positions(experiment):
    flat = {pe for pe, cls in PE_REGISTRY.items() if cls.position_dims in (None, 1)}
    params = grid(experiment)
    assert set(params["pe"]) == flat
    assert set(params["task"]) <= set(options("task"))
    assert len(params["seed"]) >= 2  # a standard deviation needs two seeds


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


def hydra_config(*overrides: str):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=list(overrides), return_hydra_config=True)
    GlobalHydra.instance().clear()
    return cfg.hydra


def test_the_cpu_ablation_is_a_sweep_run_in_parallel_one_job_per_core():
    hydra = hydra_config("experiment=ablation_cpu")
    assert str(hydra.mode) == "RunMode.MULTIRUN"
    assert hydra.launcher._target_.endswith("JoblibLauncher")
    assert hydra.launcher.n_jobs == -1


@pytest.mark.parametrize(
    ("launcher", "target"),
    [("parallel", "JoblibLauncher"), ("slurm", "SlurmLauncher"), ("local", "LocalLauncher")],
)
def test_every_launcher_option_composes_onto_hydras_plugin(launcher, target):
    hydra = hydra_config(f"hydra/launcher={launcher}")
    assert hydra.launcher._target_.endswith(target)
    if launcher == "slurm":
        assert hydra.launcher.gpus_per_node == 1 and hydra.launcher.timeout_min > 0


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


def test_the_wandb_sweep_file_runs_the_cpu_ablation_grid():
    sweep = yaml.safe_load(Path(CONFIG_DIR, "wandb_sweep.yaml").read_text())  # W&B's ${...}
    params = sweep["parameters"]
    assert params["experiment"]["value"] == "ablation_cpu"
    expected = grid("ablation_cpu")
    assert {k: [str(v) for v in params[k]["values"]] for k in expected} == expected
    assert sweep["program"] == "scripts/train.py" and "${args_no_hyphens}" in sweep["command"]
