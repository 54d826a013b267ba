"""Every option of every config group composes and instantiates; registries match the files."""

import inspect
from pathlib import Path

import pytest
from hydra.core.hydra_config import HydraConfig
from hydra.errors import MissingConfigException
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, open_dict

from pelab.assembly import build_model
from pelab.config_files import encoding_options
from pelab.errors import ConfigError
from pelab.model_kinds import MODEL_KINDS
from pelab.pe import PE_REGISTRY
from pelab.record import job_key
from pelab.tasks import TASK_REGISTRY
from pelab.tasks.dataset_files import write_example
from pelab.trainer import instantiate_all
from tests.conftest import CONFIG_DIR, compose_config, encoding_task


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (Path(CONFIG_DIR) / group).glob("*.yaml"))


GROUPS = [
    "model",
    "pe",
    "task",
    "positions",
    "trainer",
    "logger",
    "callbacks",
    "paths",
    "hydra",
    "debug",
    "experiment",
    "study_task",
]


def test_every_group_directory_is_covered():
    assert sorted(p.name for p in Path(CONFIG_DIR).iterdir() if p.is_dir()) == sorted(GROUPS)


def composed_encoding(pe: str, model: str = "decoder") -> DictConfig:
    """``model=<model> pe=<pe>`` on its ``encoding_task``: one composition per encoding and
    model for every test of this file."""
    return compose_config([f"model={model}", f"pe={pe}", f"task={encoding_task(pe)}"])


def test_config_files_and_encoding_registry_agree():
    assert options("pe") == sorted(PE_REGISTRY)
    for name in options("pe"):
        cfg = composed_encoding(name)
        assert get_class(cfg.pe._target_) is PE_REGISTRY[name]


def test_an_encodings_config_file_sets_every_option_so_a_re_evaluation_can_change_it():
    """``eval.py`` parses ``pe.<option>`` for the options the config files set
    (``pelab.config_files.encoding_options``): none of a constructor's may be missing."""
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    for name, cls in PE_REGISTRY.items():
        parameters = list(inspect.signature(cls).parameters.values())[1:]  # after ``dims``
        expected = {p.name for p in parameters if p.kind in named}
        in_file = set(composed_encoding(name).pe) - {"_target_", "_partial_"}
        assert expected <= in_file, f"configs/pe/{name}.yaml lacks {expected - in_file}"
        assert expected <= set(encoding_options()), name


def test_an_encoding_config_is_named_with_its_dimensions_exactly_when_it_reads_2d_positions():
    """The ablation grids sweep ``pe: glob(*,exclude=[*_2d,abacus])``: this name keeps them 1-D."""
    for name, cls in PE_REGISTRY.items():
        assert name.endswith("_2d") == (cls.position_dims == 2), name
        assert cls.position_dims in (None, 1, 2), f"{name}: extend the grids' exclude pattern"


def test_every_task_config_targets_a_registered_task():
    registered = set(TASK_REGISTRY.values())
    for name in options("task"):
        cfg = compose_config([f"task={name}"])
        assert get_class(cfg.task._target_) in registered


# one encoding per behaviour a model kind treats apart: rotary (bidirectional), causal only,
# digits of numbers, 2-D positions; every other encoding builds in the decoder, and the contract
# tests (tests/pe) run each through the decoder and, where defined, the encoder
REPRESENTATIVES = ("rope", "fox", "abacus", "t5_bias_2d")
MODEL_AND_ENCODING = [("decoder", pe) for pe in options("pe")] + [
    (model, pe) for model in options("model") if model != "decoder" for pe in REPRESENTATIVES
]


@pytest.mark.parametrize(("model", "pe"), MODEL_AND_ENCODING)
def test_every_model_and_encoding_builds(model, pe):
    cfg = composed_encoding(pe, model)
    if model != "decoder" and PE_REGISTRY[pe].causal_only:  # an encoder (stack) refuses it
        with pytest.raises(ConfigError, match="causal"):
            build_model(cfg, instantiate(cfg.task))
        return
    module = build_model(cfg, instantiate(cfg.task))
    assert module.kind is MODEL_KINDS[cfg.model.kind]
    net = module.net
    kind = cfg.model.kind  # encoder_rpe is an encoder_bare with the RPE code's form
    stacks = [net.encoder, net.decoder] if kind == "encoder_decoder" else [net]
    causal = {
        "decoder": [True],
        "encoder": [False],
        "encoder_bare": [False],
        "encoder_decoder": [False, True],
    }[kind]
    assert [stack.dims.causal for stack in stacks] == causal
    assert all(type(stack.pe) is PE_REGISTRY[pe] for stack in stacks)
    assert all(stack.dims.digit_tokens == module.task.digit_tokens for stack in stacks)


@pytest.mark.parametrize("task", options("task"))
def test_every_task_builds_with_valid_lengths(task, tmp_path):
    data = []
    if task == "from_dataset":  # a dataset on disk: the example's, with the example's lengths
        path = write_example(tmp_path / "data")
        data = [f"task.path={path}", "task.train_lengths=[1,8]", "task.eval_lengths=[4,8,12]"]
    cfg = compose_config([f"task={task}", *data])
    built = instantiate(cfg.task)
    assert any(built.in_distribution(n) for n in built.eval_lengths)


@pytest.mark.parametrize("group", ["trainer", "logger", "callbacks"])
@pytest.mark.integration
def test_every_trainer_logger_and_callback_option_instantiates(group, tmp_path):
    for option in options(group):
        cfg = compose_config([f"{group}={option}"], tmp_path)
        if group == "trainer":
            if cfg.trainer.accelerator == "gpu":
                assert cfg.trainer.precision == "bf16-mixed"  # no GPU here to build it on
                continue
            assert instantiate(cfg.trainer, logger=False).max_steps == cfg.trainer.max_steps
        elif option == "none":  # logger=none: no logger at all
            assert instantiate_all(cfg[group]) == []
        else:
            built = [instantiate(c) for c in cfg[group].values()]
            assert built and all(b is not None for b in built)


@pytest.mark.parametrize(
    "overlay",
    [f"debug={o}" for o in options("debug")] + [f"experiment={o}" for o in options("experiment")],
)
def test_overlays_compose(overlay):
    cfg = compose_config([overlay])
    assert cfg.trainer.max_steps > 0


def test_wandb_run_is_named_from_the_choices():
    cfg = compose_config(["pe=alibi", "task=sort", "seed=3"])
    assert cfg.logger.wandb.name == "alibi-sort-s3"
    assert cfg.logger.wandb.mode == "offline"  # WANDB_MODE set by the test fixture


def test_unknown_group_option_names_the_valid_choices():
    with pytest.raises(MissingConfigException) as info:
        compose_config(["pe=rotary"])
    message = str(info.value)
    assert "pe/rotary" in message and "rope" in message and "alibi" in message


def test_a_jobs_directory_is_named_by_its_choices_and_key_and_keeps_it_when_the_sweep_grows():
    """``<pe>_<task>_s<seed>_<job_key>``: no job number, so extending ``seed=0,1`` to
    ``seed=0,1,2`` (or adding an encoding) leaves every job's directory where it was."""
    cfg = compose_config(["pe=alibi", "task=sort", "seed=1", "model.net.d_model=32"])
    with open_dict(cfg):
        cfg.hydra = HydraConfig.get()
    name = cfg.hydra.sweep.subdir
    assert (
        name
        == f"alibi_sort_s1_{job_key(['pe=alibi', 'task=sort', 'seed=1', 'model.net.d_model=32'])}"
    )


# one or more of each kind of override: a value (``model.net.d_model=16``), a config group's choice
# (``pe=alibi``), an experiment that chooses groups itself, an addition, a forced one, a deletion
# of a group and of a value, a dict value, a setting of Hydra's; choices the defaults make anyway
# (shared with the composition without them: ``tests.conftest._chosen``), and one that an
# experiment would change (randomized_cpu: ``override /positions: randomized``)
COMPOSED = [
    ["model=decoder", "pe=rope", "task=copy", "logger=csv"],
    ["experiment=randomized_cpu", "positions=contiguous", "pe=alibi"],
    ["model.net.d_model=16", "pe=alibi", "task=reverse", "trainer.max_steps=4"],
    ["experiment=ablation_cpu", "pe=rope", "seeds=[0,1]", "learning_rates=[0.001]"],
    ["model=encoder_decoder", "positions=randomized", "+trainer.extra=1", "~logger"],
    ["++data.batch_size=8", "task.n_val=8", "hydra.job.name=named", "debug=quick"],
    ["pe=t5_bias", "pe.num_buckets=8", "tags=[a,b]", "+extra={a: 1}", "~pe.num_buckets"],
]
# each refused by Hydra: a deletion of what is not there, an unknown key, a group's unknown
# option, an addition of a key that exists, a sweep in a single run, an override it cannot parse,
# a group's null choice
REFUSED = [
    ["model.net.d_model=["],
    ["pe=rope", "~no_such_key"],
    ["pe=rope", "no_such_key=1"],
    ["pe=no_such_encoding"],
    ["+model.net.d_model=8"],
    ["pe=rope,alibi"],
    ["experiment=null", "pe=rope"],
]


def hydras_own(overrides: list[str]):
    """Hydra's own composition of ``train`` with ``overrides``, uncached."""
    from tests.conftest import _hydras_composition

    return _hydras_composition("train", tuple(overrides))


@pytest.mark.parametrize("overrides", COMPOSED)
def test_a_tests_composition_equals_hydras_own(overrides):
    """``compose_config`` composes the overrides that choose configs once and applies the
    others to a copy (``tests.conftest._hydra_composed``): the config, its ``hydra`` node and
    its flags are what Hydra's own composition makes of the same overrides."""
    from omegaconf import OmegaConf

    from tests.conftest import _hydra_composed

    hydras, ours = hydras_own(overrides), _hydra_composed("train", overrides)
    plain = {"resolve": False, "enum_to_str": False}
    assert OmegaConf.to_container(ours, **plain) == OmegaConf.to_container(hydras, **plain)
    assert OmegaConf.is_struct(ours) and not OmegaConf.is_readonly(ours.hydra)
    assert list(ours.hydra.overrides.task) == [o for o in overrides if not o.startswith("hydra.")]


@pytest.mark.parametrize("overrides", REFUSED)
def test_a_tests_composition_refuses_what_hydra_refuses(overrides):
    from tests.conftest import _hydra_composed

    with pytest.raises(Exception) as hydras:
        hydras_own(overrides)
    with pytest.raises(type(hydras.value)) as ours:
        _hydra_composed("train", overrides)
    assert type(ours.value.__cause__) is type(hydras.value.__cause__)
    assert str(ours.value) == str(hydras.value)
