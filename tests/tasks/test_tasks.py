"""The task contract, checked for every registered task through the Task API only.

Each task is built with ``cls.example_settings(directory)`` (its defaults, or a tiny example
dataset), alone and with each of its declared ``variants``, and probed at the ends of its train
range and at its longest evaluation length; each of these fits one batch in every model kind
(``pelab.model_kinds``) as a run builds it, without the Trainer; whole runs in every model kind
take a few tasks of different layouts.
"""

import copy
import functools
import inspect
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf, open_dict

from pelab.assembly import build_model, build_task, check_training, data_module
from pelab.errors import ConfigError
from pelab.metrics import summary
from pelab.model_kinds import MODEL_KINDS
from pelab.outcome import scored_outcome
from pelab.tasks import TASK_REGISTRY, Task
from pelab.tasks.base import expand_lengths
from pelab.threads import configure_threads
from pelab.tokens import N_SPECIAL
from pelab.train import train
from tests.conftest import CONFIG_DIR, TINY, compose_config

TASKS = sorted(TASK_REGISTRY)
# every registered task with its defaults, then with each of its declared variants
SETTINGS = [(name, {}) for name in TASKS] + [
    (name, variant) for name in TASKS for variant in TASK_REGISTRY[name].variants
]
SETTING_IDS = [f"{n}{v or ''}" for n, v in SETTINGS]
# constructor parameters that set the protocol, not the data of one (split, length) set
PROTOCOL_PARAMS = {"train_lengths", "eval_lengths", "n_val", "n_test", "eval_seed"}
# the encoding of the runs, by the task's position_dims
RUN_PE = {1: "rope", 2: "rope_2d"}


def settings_of(name: str, variant: dict[str, Any], directory: Path) -> dict[str, Any]:
    return {**TASK_REGISTRY[name].example_settings(directory), **variant}


@pytest.fixture(params=SETTINGS, ids=SETTING_IDS)
def task(request, tmp_path_factory) -> Task:
    name, variant = request.param
    return TASK_REGISTRY[name](**settings_of(name, variant, tmp_path_factory.mktemp(name)))


def probe_lengths(task: Task) -> list[int]:
    return sorted({*task.train_lengths, max(task.eval_lengths)})


def test_generated_answers_equal_the_reference_solver(task):
    for length in probe_lengths(task):
        prompt, answer = task.sample(32, length, torch.Generator().manual_seed(length))
        for p, a in zip(prompt.tolist(), answer.tolist(), strict=True):
            assert a == task.reference(p), (task.task_name, length, p)


def test_shapes_follow_the_length_axis_and_tokens_are_symbols(task):
    for length in probe_lengths(task):
        prompt, answer = task.sample(16, length, torch.Generator().manual_seed(0))
        assert prompt.shape == (16, task.prompt_length(length))
        assert answer.shape == (16, task.answer_length(length))
        assert prompt.dtype == answer.dtype == torch.long
        for t in (prompt, answer):  # BOS, SEP and BLANK belong to the model kinds
            assert t.min() >= N_SPECIAL and t.max() < task.vocab_size
        assert task.prompt_length(length) + task.answer_length(length) + 2 <= (
            task.max_sequence_length()
        )


@pytest.mark.parametrize("length", [64, 512])
@pytest.mark.parametrize("name", TASKS)
def test_settings_at_build_every_task_at_the_benchmark_lengths(name, length, tmp_path):
    """With ``settings_at`` (what the benchmark passes), every task builds at 64 and 512 (a
    task with a bounded length axis at its ``max_length``) and its answers there still equal
    the reference solver's."""
    cls = TASK_REGISTRY[name]
    length = min(length, cls.max_length or length)
    task = cls(
        train_lengths=[length, length], eval_lengths=[length], **cls.settings_at(length, tmp_path)
    )
    prompt, answer = task.sample(2, length, torch.Generator().manual_seed(0))
    assert prompt.shape == (2, task.prompt_length(length))
    assert [task.reference(p) for p in prompt.tolist()] == answer.tolist()


def fit_checks() -> list:
    """Every setting of every task (its defaults and each of its ``variants``) x every model
    kind: (1 + variants) x 4 one-batch checks per task, milliseconds each."""
    return [
        pytest.param(*SETTINGS[i], kind, id=f"{SETTING_IDS[i]}-{kind}")
        for i in range(len(SETTINGS))
        for kind in MODEL_KINDS
    ]


# The whole runs (the Trainer, the record) in every model kind, on tasks of different layouts: a
# one-token answer (parity), an answer whose length has its own axis (scan: actions from a
# shorter command), 2-D coordinates (grid, rope_2d). Digit tokens in every model kind:
# tests/pe/test_abacus.py (addition, pe=abacus). The number of these runs does not depend on the
# registries (test_growth.py).
LAYOUTS = {"parity": {}, "scan": {}, "grid": {}}
LAYOUT_RUNS = [
    pytest.param(name, kind, id=f"{name}-{kind}") for name in LAYOUTS for kind in MODEL_KINDS
]


def short_and_long(name: str, variant: dict[str, Any], directory: Path) -> dict[str, Any]:
    """The example settings of ``name`` with its evaluation lengths cut to two: the shortest
    in-distribution and the longest."""
    settings = settings_of(name, variant, directory)
    example = TASK_REGISTRY[name](**settings)
    inside = [n for n in example.eval_lengths if example.in_distribution(n)]
    settings["eval_lengths"] = [min(inside), max(example.eval_lengths)]
    return settings


def task_overrides(name: str, settings: dict[str, Any]) -> list[str]:
    """``task=<name> pe=<its encoding> ++task.<key>=<value>...``"""
    pe = RUN_PE[TASK_REGISTRY[name].position_dims]
    return [
        f"task={name}",
        f"pe={pe}",
        *(f"++task.{key}={json.dumps(value)}" for key, value in settings.items()),
    ]


@functools.cache
def kind_model(kind: str) -> DictConfig:
    """The composed ``model`` of ``model=<kind>`` (tiny): no other group changes it, so one task's
    config with it is that task's config with ``model=<kind>`` (checked below)."""
    return compose_config([*TINY, f"model={kind}"]).model


def with_kind(cfg: DictConfig, kind: str) -> DictConfig:
    cfg = copy.deepcopy(cfg)
    with open_dict(cfg):
        cfg.model = copy.deepcopy(kind_model(kind))
    return cfg


@pytest.fixture(scope="module")
def composed(tmp_path_factory):
    """``(settings, config)`` of a task setting, composed once per module: its example settings
    with two evaluation lengths, and ``python scripts/train.py task=<name> ...`` tiny, with
    every path in a directory of its own (the model kinds of a setting share its evaluation
    sets, as runs with one cache directory do)."""
    cache: dict[str, tuple[dict[str, Any], DictConfig]] = {}

    def get(name: str, variant: dict[str, Any]) -> tuple[dict[str, Any], DictConfig]:
        key = f"{name}{json.dumps(variant, sort_keys=True)}"
        if key not in cache:
            directory = tmp_path_factory.mktemp(name)
            settings = short_and_long(name, variant, directory)
            overrides = [*TINY, "logger=csv", *task_overrides(name, settings)]
            cache[key] = settings, compose_config(overrides, directory)
        return cache[key]

    yield get
    GlobalHydra.instance().clear()


@pytest.mark.parametrize("kind", MODEL_KINDS)
def test_a_model_kind_composes_apart_from_the_task(tmp_path, kind):
    """The shortcut of the one-batch checks: a setting's config with ``kind_model(kind)`` is what
    Hydra composes for ``model=<kind>``."""
    settings = short_and_long("scan", {}, tmp_path)
    overrides = [*TINY, "logger=csv", *task_overrides("scan", settings)]
    direct = compose_config([*overrides, f"model={kind}"], tmp_path)
    assert with_kind(compose_config(overrides, tmp_path), kind) == direct
    assert direct.model.kind == kind


def check_metrics(metrics: dict[str, Any], settings: dict[str, Any]) -> None:
    """A record's ``metrics``: both metrics and their chance levels at both lengths."""
    lengths = [str(n) for n in settings["eval_lengths"]]
    assert list(metrics["test"]) == lengths == list(metrics["chance"])
    for length in lengths:
        m, c = metrics["test"][length], metrics["chance"][length]
        assert 0 <= m["exact_match"] <= m["token_acc"] <= 1
        assert 0 <= c["exact_match"] <= c["token_acc"] <= 1


@pytest.mark.parametrize(("name", "variant", "model"), fit_checks())
def test_fits_one_batch_in_every_model_kind(composed, name, variant, model):
    """``python scripts/train.py task=<name> model=<model>`` as the run assembles it (its checks,
    model and data module), without the Trainer: a training batch at each end of the training
    range gives a finite loss whose gradient reaches the network; the first validation batch and
    the first test batch at each evaluation length are scored as the run scores them (the longest
    length's greedy answer checked for its shape), and their scores with the chance levels make
    the record's metrics. The task keeps its settings."""
    settings, cfg = composed(name, variant)
    cfg = with_kind(cfg, model)
    config = OmegaConf.to_container(cfg, resolve=True)  # what the record's "config" holds
    assert {key: config["task"][key] for key in settings} == settings
    check_training(cfg)
    task = build_task(cfg)
    model_ = build_model(cfg, task)
    configure_threads(cfg, model_.net.num_params()["total"])  # as the run: 1 for a tiny model
    data = data_module(cfg, task)
    first = data.train_batches()[0]  # training step 0's batch, one per member
    longest = task.sample(
        cfg.data.batch_size, task.train_lengths[1], torch.Generator().manual_seed(0)
    )
    for step, batch in enumerate([first, (longest,)]):
        model_.train()
        loss = model_.member_losses(batch, step)[0]
        assert loss.shape == () and torch.isfinite(loss) and loss > 0
        model_.net.zero_grad()
        loss.backward()
        grads = [p.grad for p in model_.net.parameters() if p.grad is not None]
        assert grads and all(torch.isfinite(g).all() for g in grads)
        assert any(g.abs().sum() > 0 for g in grads)
    model_.eval()
    decoded = []  # what the test step's greedy decoding answered
    model_.correct = lambda *args, **kwargs: (
        decoded.append(type(model_).correct(model_, *args, **kwargs)) or decoded[-1]
    )
    with torch.no_grad():
        for split, loaders in (("val", data.val_dataloader()), ("test", data.test_dataloader())):
            for i, loader in enumerate(loaders):
                batch = next(iter(loader))
                step_of = model_.validation_step if split == "val" else model_.test_step
                step_of(batch, 0, i)
            model_.epoch_scores(split)
    correct = decoded[-1]  # the longest length's, answered greedily
    assert correct.shape == batch["answer"].shape and correct.dtype == torch.bool
    result = scored_outcome(cfg, model_)
    check_metrics(summary(result.scores, task.in_distribution, result.chance), settings)


@pytest.mark.integration
@pytest.mark.parametrize(("name", "model"), LAYOUT_RUNS)
def test_trains_and_tests_in_every_model_kind(tiny_cfg, tmp_path, name, model):
    """``python scripts/train.py task=<name> model=<model>`` in-process, tiny, tested at the
    shortest in-distribution and the longest evaluation length of the example: it completes,
    keeps the task's settings and reports both metrics and their chance level at both lengths."""
    settings = short_and_long(name, LAYOUTS[name], tmp_path)
    [record] = train(tiny_cfg(f"model={model}", *task_overrides(name, settings)))
    assert record["status"] == "completed"
    assert {key: record["config"]["task"][key] for key in settings} == settings
    check_metrics(record["metrics"], settings)


def test_every_symbol_of_the_vocabulary_occurs(task):
    """The vocabulary is no larger than the data needs: a large batch uses every symbol."""
    prompt, answer = task.sample(512, task.train_lengths[1], torch.Generator().manual_seed(0))
    used = set(prompt.unique().tolist()) | set(answer.unique().tolist())
    assert used == set(range(N_SPECIAL, task.vocab_size))


def test_digit_tokens_are_distinct_symbols_that_occur(task):
    """``Task.digit_tokens`` (read by ``pe=abacus``): distinct symbols of the task's own alphabet,
    each of which the data uses."""
    digits = task.digit_tokens
    assert isinstance(digits, tuple) and len(set(digits)) == len(digits)
    assert all(N_SPECIAL <= t < task.vocab_size for t in digits)
    prompt, answer = task.sample(512, task.train_lengths[1], torch.Generator().manual_seed(0))
    assert set(digits) <= set(prompt.unique().tolist()) | set(answer.unique().tolist())


def test_same_seed_same_data_other_seed_other_data(task):
    length = task.train_lengths[1]
    a = task.sample(8, length, torch.Generator().manual_seed(3))
    b = task.sample(8, length, torch.Generator().manual_seed(3))
    c = task.sample(8, length, torch.Generator().manual_seed(4))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not (torch.equal(a[0], c[0]) and torch.equal(a[1], c[1]))


def test_spec_names_every_data_parameter_and_is_json(task):
    spec = task.spec()
    assert json.loads(json.dumps(spec)) == spec
    signature = inspect.signature(type(task).__init__).parameters.values()
    data_params = {
        p.name
        for p in signature
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }
    assert data_params - PROTOCOL_PARAMS <= set(spec)


def test_protocol_attributes(task):
    assert isinstance(task.length_axis, str) and task.length_axis
    assert task.vocab_size > N_SPECIAL
    assert any(task.in_distribution(n) for n in task.eval_lengths)
    for length in (*task.train_lengths, *task.eval_lengths):
        task.check_length(length)  # raises ConfigError for a length the task cannot build
    n, m = task.prompt_length(task.train_lengths[1]), task.answer_length(task.train_lengths[1])
    if task.position_dims > 1:  # a 1-D task takes the run's position sampler
        assert task.coordinates(n, m).shape == (n + m + 2, task.position_dims)


@pytest.mark.parametrize("name", TASKS)
def test_every_task_has_its_config_file(name):
    path = Path(CONFIG_DIR) / "task" / f"{name}.yaml"
    assert path.exists(), f"task {name!r} has no configs/task/{name}.yaml"
    text = path.read_text()
    assert text.startswith("#"), "the config's first line states the task and its protocol"
    assert get_class(OmegaConf.load(path)._target_) is TASK_REGISTRY[name]


def test_in_distribution_split_and_longest_sequence():
    task = TASK_REGISTRY["copy"](train_lengths=[2, 10], eval_lengths=[5, 10, 20])
    assert [task.in_distribution(n) for n in task.eval_lengths] == [True, True, False]
    assert task.max_sequence_length() == 20 + 20 + 2  # BOS, prompt, SEP, answer


def test_a_range_in_eval_lengths_stands_for_every_length_in_it():
    task = TASK_REGISTRY["copy"](train_lengths=[1, 10], eval_lengths=[5, 10, "11..14", 20])
    assert task.eval_lengths == [5, 10, 11, 12, 13, 14, 20]
    assert expand_lengths(["3..3", 1]) == [3, 1]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"eval_lengths": [5, "11-40"]}, r"'11-40' is neither a length nor a range 'a..b'"),
        ({"eval_lengths": [5, "40..11"]}, r"the range '40..11' is empty"),
        ({"train_lengths": [10, 2]}, r"train_lengths must be \[min, max\].*got \[10, 2\]"),
        ({"train_lengths": [0, 4]}, r"1 <= min"),
        ({"eval_lengths": [0, 8]}, r"eval_lengths must be .*>= 1, got \[0, 8\]"),
        ({"eval_lengths": []}, r"non-empty"),
        ({"eval_lengths": [32, 64]}, r"no in-distribution length"),
        ({"num_symbols": 1}, r"num_symbols must be >= 2"),
    ],
)
def test_bad_task_settings_are_refused_with_the_value(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        TASK_REGISTRY["copy"](**kwargs)


class Digits(Task):
    """A stand-in fixed-alphabet task with only even lengths (not registered)."""

    fixed_num_symbols = 10

    def check_length(self, length: int) -> None:
        if length % 2:
            raise ConfigError(f"Digits: lengths must be even, got {length}")

    def solve(self, prompt):
        return prompt

    @staticmethod
    def reference(prompt):
        return prompt


def test_a_fixed_alphabet_sets_num_symbols_and_refuses_another():
    assert Digits(train_lengths=[2, 4], eval_lengths=[4]).vocab_size == N_SPECIAL + 10
    assert Digits(train_lengths=[2, 4], eval_lengths=[4], num_symbols=10).num_symbols == 10
    with pytest.raises(ConfigError, match=r"fixed alphabet of 10 symbols.*got 5"):
        Digits(train_lengths=[2, 4], eval_lengths=[4], num_symbols=5)


def test_open_alphabets_default_to_32_symbols():
    assert TASK_REGISTRY["copy"]().num_symbols == 32
    assert TASK_REGISTRY["copy"](num_symbols=None).num_symbols == 32


def test_lengths_are_checked_at_construction():
    task = Digits(train_lengths=[2, 4], eval_lengths=[4, 8])
    task.check_length(8)
    with pytest.raises(ConfigError, match="lengths must be even, got 7"):
        task.check_length(7)
    with pytest.raises(ConfigError, match="lengths must be even, got 3"):
        Digits(train_lengths=[3, 4], eval_lengths=[4])
    with pytest.raises(ConfigError, match="lengths must be even, got 9"):
        Digits(train_lengths=[2, 4], eval_lengths=[4, 9])
