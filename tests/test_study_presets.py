"""The study presets follow their papers: the NoPE study's tasks (configs/study_task/nope/,
swept by ``nope_decoder_*``) and the Chomsky protocol (``chomsky_*``). Each protocol choice is
read off the composed config and the task it builds, against the papers' values (docs/tasks.md,
"Study presets", lists what still differs)."""

from pathlib import Path

import pytest
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate

from pelab.model_kinds import BareEncoderKind, get_model_kind
from tests.conftest import CONFIG_DIR, compose_config

NOPE_TASKS = sorted(p.stem for p in (Path(CONFIG_DIR) / "study_task" / "nope").glob("*.yaml"))
# the study's splits: copy and reverse len_tr20_ts40, scan len_tr25_ts48 (actions), the others
# len_tr8_ts16 (pcfg: functions)
NOPE_TRAIN_MAX = {
    name: 20 if name.startswith(("copy", "reverse")) else 25 if name == "scan" else 8
    for name in NOPE_TASKS
}
# tested on every longer length up to 2n; scan: every action count from 26 to 48 with commands
NOPE_TEST = {name: list(range(n + 1, 2 * n + 1)) for name, n in NOPE_TRAIN_MAX.items()}
NOPE_TEST["scan"] = [26, 27, 28, 30, 32, 33, 36, 40, 48]


def grid(experiment: str, group: str) -> list[str]:
    compose_config([f"experiment={experiment}"])
    return str(HydraConfig.get().sweeper.params[group]).split(",")


def nope_task(experiment: str, name: str):
    cfg = compose_config([f"experiment={experiment}", f"study_task=nope/{name}"])
    return cfg, instantiate(cfg.task)


def test_the_study_has_its_tasks_and_the_gpu_preset_sweeps_them_all():
    assert NOPE_TASKS == [
        "addition",
        "copy",
        "copy_double",
        "copy_repeated",
        "lego",
        "parity",
        "pcfg",
        "polynomial_evaluation",
        "reverse",
        "scan",
        "sort",
        "sort_multi_digit",
        "summation",
    ]
    assert sorted(grid("nope_decoder_gpu", "study_task")) == [f"nope/{t}" for t in NOPE_TASKS]
    assert set(grid("nope_decoder_cpu", "study_task")) <= {f"nope/{t}" for t in NOPE_TASKS}


@pytest.mark.parametrize("experiment", ["nope_decoder_cpu", "nope_decoder_gpu"])
@pytest.mark.parametrize("name", NOPE_TASKS)
def test_nope_lengths_train_up_to_n_and_test_every_length_to_2n(experiment, name):
    cfg, task = nope_task(experiment, name)
    n = NOPE_TRAIN_MAX[name]
    assert task.train_lengths == (1, n)
    assert [m for m in task.eval_lengths if not task.in_distribution(m)] == NOPE_TEST[name]
    assert n in task.eval_lengths  # in distribution: shows the task was learned
    assert cfg.data.length_sampling == "uniform"  # each length bin equally often
    assert get_model_kind(cfg.model.kind).net_options == {"causal": True}


@pytest.mark.parametrize(
    ("name", "settings", "symbols"),
    [
        ("copy", {"variant": "random"}, 100),
        ("copy_double", {"variant": "double_next"}, 100),
        ("copy_repeated", {"variant": "repeated"}, 100),
        ("reverse", {}, 100),
        ("sort", {"digits": None}, 50),
        ("sort_multi_digit", {"digits": 4}, 10),
        ("addition", {"leading_zeros": False, "reverse_answer": False}, 11),
        ("summation", {}, 10),
        ("parity", {}, 4),
        ("polynomial_evaluation", {}, 14),
        ("lego", {"query": True, "shuffle": True, "num_names": 26}, 30),
        ("scan", {}, 20),  # 13 words, 6 actions, END
        ("pcfg", {"letters": 520}, 532),  # 520 letters, 10 functions, ",", END
    ],
)
def test_nope_alphabets_and_formats(name, settings, symbols):
    _, task = nope_task("nope_decoder_cpu", name)
    assert {key: getattr(task, key) for key in settings} == settings
    assert task.num_symbols == symbols


def test_nope_copy_double_separates_the_copies_with_next():
    _, task = nope_task("nope_decoder_cpu", "copy_double")
    assert task.reference([5, 6]) == [5, 6, task.end, 5, 6]


def test_the_gpu_nope_preset_trains_as_the_released_configs():
    cfg = compose_config(["experiment=nope_decoder_gpu"])
    net, optimizer = cfg.model.net, cfg.model.optimizer
    assert (net.n_layers, net.d_model, net.n_heads, net.d_ff) == (12, 768, 12, 3072)
    assert (optimizer.lr, optimizer.weight_decay, cfg.data.batch_size) == (3e-5, 0.05, 64)
    assert cfg.trainer.max_steps == 40000
    assert cfg.model.schedule.warmup_steps == 0.06 * cfg.trainer.max_steps


@pytest.mark.parametrize(
    ("experiment", "n", "m"), [("chomsky_cpu", 10, 40), ("chomsky_gpu", 40, 500)]
)
def test_chomsky_presets_feed_the_papers_layout_and_score_every_unseen_length(experiment, n, m):
    cfg = compose_config([f"experiment={experiment}"])
    assert get_model_kind(cfg.model.kind) is BareEncoderKind  # no BOS or SEP
    assert cfg.data.length_sampling == "uniform"
    for name in grid(experiment, "task"):
        cfg = compose_config([f"experiment={experiment}", f"task={name}"])
        task = instantiate(cfg.task)
        assert task.train_lengths == (1, n), name
        assert [k for k in task.eval_lengths if not task.in_distribution(k)] == list(
            range(n + 1, m + 1)
        ), name


RPE_CODE_FORM = {
    "norm": "post",
    "final_norm": False,
    "activation": "relu",
    "head_bias": True,
    "init": "haiku",
    "embedding": "rpe",
    "attention_dropout": False,
}


@pytest.mark.parametrize(
    ("experiment", "layers", "steps"), [("rpe_cpu", 2, 1000), ("rpe_gpu", 5, 10**6)]
)
def test_the_rpe_presets_train_the_rpe_codes_network_on_its_draws(experiment, layers, steps):
    cfg = compose_config([f"experiment={experiment}"])
    assert get_model_kind(cfg.model.kind) is BareEncoderKind
    net, optimizer = cfg.model.net, cfg.model.optimizer
    assert dict(net.form) == RPE_CODE_FORM and net.dropout == 0.1
    assert (net.n_layers, net.d_model, net.n_heads) == (layers, 64, 8)
    assert (tuple(optimizer.betas), optimizer.eps, optimizer.weight_decay) == (
        (0.9, 0.999),
        1e-8,
        0,
    )
    assert cfg.model.schedule.min_lr_ratio == 1.0 and cfg.model.schedule.warmup_steps == 0
    assert (cfg.trainer.gradient_clip_val, cfg.data.batch_size) == (1.0, 128)
    assert cfg.trainer.max_steps == steps and cfg.data.length_sampling == "uniform"
    assert grid(experiment, "positions") == ["contiguous", "randomized_rpe"]
    drawn = instantiate(
        compose_config([f"experiment={experiment}", "positions=randomized_rpe"]).positions
    )
    assert (drawn.max_position, drawn.per, drawn.layered) == (2048, "batch", True)
