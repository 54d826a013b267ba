"""Shared fixtures: Hydra composition in-process (imports are paid once per session)."""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import multiprocessing.process
import os
import pickle
import subprocess
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, open_dict
from omegaconf.errors import OmegaConfBaseException

from hydra_plugins.pelab_launcher.job_config import configs_read_once
from pelab.threads import available_cores
from tests import zygote

CONFIG_DIR = str(Path(__file__).resolve().parents[1] / "configs")
# No garbage collection while the session starts (imports, then collection: the objects it makes
# live to its end, so the collector's passes over them find nothing): it cost a worker 5-6 s of
# its ~21 s start. Back on once the tests are collected (``pytest_collection_finish``), or where
# nothing is collected (pytest-xdist's controller: ``pytest_configure``).
gc.disable()

# A model and budget small enough for a test: a full run in a few seconds.
TINY = [
    "model.net.d_model=16",
    "model.net.n_heads=2",
    "model.net.n_layers=1",
    "trainer.max_steps=4",
    "trainer.val_check_interval=2",
    "task.n_val=8",
    "task.n_test=8",
    "data.batch_size=8",
    "data.eval_batch_size=8",
]


# The tiers (pyproject.toml's markers; Makefile): a test that starts a Python process is marked
# ``processes`` (``make test-processes``; ``make test`` leaves them out), one that runs the
# Lightning Trainer in-process ``integration`` (``make test-unit`` leaves them out). Every test is
# watched: one that starts either unmarked (its fixtures included) fails, naming the marker.
# (A Python process: sys.executable, a script, multiprocessing, a fork of ``tests.zygote``;
# ``git`` and the like are not.)
STARTED: list[str] = []  # what the current test started


def _watch(owner: type, method: str, what: str, counts=lambda *args, **kwargs: True) -> None:
    original = getattr(owner, method)

    @functools.wraps(original)
    def watched(*args, **kwargs):
        if counts(*args, **kwargs):
            STARTED.append(what)
        return original(*args, **kwargs)

    setattr(owner, method, watched)


def _python(popen: subprocess.Popen, args, *rest, **kwargs) -> bool:
    """Whether ``subprocess.Popen(args)`` starts Python, itself or through another command
    (``unshare ... sh -c "python scripts/train.py ..."``); ``git rev-parse`` and other short
    commands do not count."""
    words = [args] if isinstance(args, str | bytes | os.PathLike) else args
    tokens = [token for word in words for token in os.fsdecode(word).split()]
    return any(Path(token).name.startswith("python") for token in tokens)


_watch(subprocess.Popen, "__init__", "a Python process (subprocess)", _python)
_watch(multiprocessing.process.BaseProcess, "start", "a Python process (multiprocessing)")
_watch(zygote.Zygote, "spawn", "a Python process (forked by tests.zygote)")
SESSION_THREADS = 0  # torch's threads when the test session started (``pytest_configure``)


def pytest_configure(config: pytest.Config) -> None:
    """In a process that runs the tests (a pytest-xdist worker, or pytest without workers): the
    Trainer watched, and torch's threads shared among the workers. pytest-xdist's controller
    only hands the tests out, and so starts its workers without these imports (~7 s here)."""
    global SESSION_THREADS
    if config.getoption("dist", "no") != "no":  # the controller (a worker's is "no")
        gc.enable()
        return
    import lightning
    import torch

    _watch(lightning.Trainer, "__init__", "the Lightning Trainer")
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        # a worker of pytest-xdist (make test): the cores shared among the workers, not each
        # taking them all (entry points still choose their own: pelab.threads)
        workers = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
        torch.set_num_threads(max(1, available_cores() // workers))
    SESSION_THREADS = torch.get_num_threads()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files that start processes or run the Trainer first: pytest-xdist's ``loadfile``
    hands out files in this order, so the long ones start at once and the many short unit files
    even out the workers' ends (the suite's wall time, not its work)."""
    heavy = {item.path for item in items if item.get_closest_marker("integration")}
    items.sort(key=lambda item: item.path not in heavy)  # stable: each file's order kept


def pytest_collection_finish(session: pytest.Session) -> None:
    """What the process holds once the tests are collected (the imports, the tests) stays to
    the end: ``gc.freeze`` keeps it out of the garbage collector's full passes, which would walk
    it again and again (the collector's time 10.5 s -> 7.5 s in 172 s of tests, idle)."""
    gc.freeze()
    gc.enable()


def pytest_runtest_setup(item: pytest.Item) -> None:
    STARTED.clear()  # before the test's fixtures: a module fixture counts for its first test


@pytest.fixture(autouse=True)
def _tier(request: pytest.FixtureRequest) -> None:
    yield
    marked = {m.name for m in request.node.iter_markers()} & {"integration", "processes", "slow"}
    started = ", ".join(sorted(set(STARTED)))
    if any(s.startswith("a Python process") for s in STARTED) and not marked - {"integration"}:
        pytest.fail(
            f"{request.node.nodeid} started {started}: mark it @pytest.mark.processes (make "
            "test-processes runs them; make test runs everything in-process)",
            pytrace=False,
        )
    if STARTED and not marked:
        pytest.fail(
            f"{request.node.nodeid} started {started}: mark it @pytest.mark.integration (make "
            "test-unit runs neither processes nor Trainers)",
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def _offline_wandb(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")


@pytest.fixture(autouse=True)
def _torch_threads() -> None:
    """Torch's threads back to the session's after each test (entry points set them:
    pelab.threads). Not "as before the test": a module-scoped fixture that ran an entry point
    is set up before this fixture and would leak its choice into every later test (an
    in-process run at 1 thread is then no longer bitwise a command-line run at the default)."""
    import torch

    yield
    torch.set_num_threads(SESSION_THREADS)


def _hydras_composition(
    config_name: str, choices: tuple[str, ...], read: dict | None = None
) -> DictConfig:
    """Hydra's own composition (with its ``hydra`` node) of ``config_name`` with ``choices``,
    the overrides that choose its configs (``_chooses``); with ``read``, each config file is
    read once into it (``configs_read_once``, as the checked sweeper composes a sweep's jobs)."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        with configs_read_once(loader, read) if read is not None else contextlib.nullcontext():
            return compose(config_name, overrides=list(choices), return_hydra_config=True)


# the config files as the session's compositions read them (``configs_read_once``): a session
# does not change them, and reading them was a third of a composition
CONFIGS_READ: dict = {}


@functools.cache
def _composed(config_name: str, choices: tuple[str, ...], cwd: str) -> bytes:
    """``_hydras_composition`` pickled, made once per session for each config name, choices
    and working directory (``hydra.runtime.cwd``): a composition reads and merges the 20
    configs of its defaults list (0.33 s idle), an unpickled copy of it takes 4 ms (a deep copy
    19 ms). The workers of one session share what they compose (``COMPOSITIONS``): its inputs
    are the config files and the code, which a session does not change."""
    key = hashlib.sha256(repr((config_name, choices, cwd)).encode()).hexdigest()
    shared = COMPOSITIONS / f"{key}.pickle" if COMPOSITIONS else None
    if shared and shared.exists():
        return shared.read_bytes()
    composed = pickle.dumps(_hydras_composition(config_name, choices, CONFIGS_READ))
    if shared:
        partial = shared.with_suffix(f".{os.getpid()}")
        partial.write_bytes(composed)
        partial.replace(shared)  # whole or absent for another worker
    return composed


@functools.cache
def _parsed(override: str) -> Override:
    (parsed,) = OverridesParser.create().parse_overrides([override])  # Hydra's errors, as is
    return parsed


@functools.cache
def _is_group(key: str) -> bool:
    """Whether ``key`` is a config group (``pe``, ``hydra/launcher``), as Hydra says."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return GlobalHydra.instance().hydra.config_loader.repository.group_exists(key)


def _chooses(override: Override) -> bool:
    """Whether Hydra reads ``override`` while it composes (a config group's choice, a sweep, a
    setting of Hydra's) rather than setting a value of the composed config afterwards
    (``defaults_list.Overrides``: a value is a dict or its key is no group)."""
    if override.is_hydra_override() or override.is_sweep_override():
        return True
    return not isinstance(override.value(), dict) and _is_group(override.key_or_group)


@functools.cache
def _defaults(config_name: str) -> dict[str, str]:
    """The option each config group of ``config_name`` takes when no override chooses one
    (wherever it is composed from: the working directory is only recorded)."""
    bare = pickle.loads(_composed(config_name, (), os.getcwd()))
    return dict(bare.hydra.runtime.choices)


def _chosen(config_name: str, choices: list[Override]) -> DictConfig:
    """A copy of the composition of ``choices`` (``_composed``), shared with every list of
    choices that differs from it by group choices the composition makes anyway: ``pe=rope``
    chooses what the defaults list does, so it composes the config ``model=encoder`` alone
    does (``hydra.runtime.choices`` says what was chosen; whatever ``hydra.overrides`` and
    ``hydra.job.override_dirname`` hold, ``_hydra_composed`` sets). A choice is left out when
    the defaults choose it, and kept when the composition without it chooses otherwise (an
    experiment's ``override /pe: alibi``) or when a group is named twice."""
    cwd, lines = os.getcwd(), tuple(o.input_line for o in choices)
    plain = [  # ``group=option``: no addition, deletion, package, sweep or Hydra setting
        o
        for o in choices
        if o.type == OverrideType.CHANGE
        and o.package is None
        and not o.is_sweep_override()
        and not o.is_hydra_override()
    ]
    groups = [o.key_or_group for o in choices]
    defaults = _defaults(config_name)
    made = [
        o
        for o in plain
        if groups.count(o.key_or_group) == 1
        and isinstance(o.value(), str)
        and defaults.get(o.key_or_group) == o.value()
    ]
    if made:
        rest = tuple(o.input_line for o in choices if all(o is not m for m in made))
        cfg = pickle.loads(_composed(config_name, rest, cwd))
        if all(cfg.hydra.runtime.choices.get(o.key_or_group) == o.value() for o in made):
            return cfg
    return pickle.loads(_composed(config_name, lines, cwd))


def _hydra_composed(config_name: str, overrides: list[str]) -> DictConfig:
    """Hydra's composition of ``config_name`` with ``overrides``, and with its ``hydra`` node, as
    ``ConfigLoaderImpl.load_configuration`` makes it: the composition of the overrides that
    choose configs (shared: ``_composed``), then the other overrides applied to a copy of it by
    Hydra's own code, in their order, and recorded in ``hydra.overrides.task`` and
    ``hydra.job.override_dirname`` in the order given. Tests make many runs that differ only in
    values (``TINY`` and one setting), and each saves a composition this way
    (tests/test_configs.py checks it equals Hydra's own composition)."""
    parsed = [_parsed(override) for override in overrides]
    cfg = _chosen(config_name, [o for o in parsed if _chooses(o)])
    try:
        ConfigLoaderImpl._apply_overrides_to_config([o for o in parsed if not _chooses(o)], cfg)
    except OmegaConfBaseException as error:  # as load_configuration raises it
        raise ConfigCompositionException().with_traceback(error.__traceback__) from error
    task = [o for o in parsed if not o.is_hydra_override()]
    job = cfg.hydra.job
    cfg.hydra.overrides.task = [o.input_line for o in task]
    job.override_dirname = get_overrides_dirname(
        overrides=task,
        kv_sep=job.config.override_dirname.kv_sep,
        item_sep=job.config.override_dirname.item_sep,
        exclude_keys=job.config.override_dirname.exclude_keys,
    )
    return cfg


def encoding_task(pe: str) -> str:
    """A task that encoding ``pe`` applies to: a grid for 2-D positions, numbers for digit
    tokens (abacus), else copy."""
    from pelab.pe import PE_REGISTRY

    task = "grid" if PE_REGISTRY[pe].position_dims == 2 else "copy"
    return "addition" if PE_REGISTRY[pe].needs_digit_tokens else task


def compose_config(
    overrides: list[str], tmp_path: Path | None = None, config_name: str = "train"
) -> DictConfig:
    """``configs/<config_name>.yaml`` composed as its script would, with the Hydra context set,
    and every path inside ``tmp_path``."""
    cfg = _hydra_composed(config_name, overrides)
    HydraConfig().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
        if tmp_path is not None:
            cfg.paths.root_dir = str(tmp_path)
            cfg.paths.output_dir = str(tmp_path / "run")
            cfg.paths.cache_dir = str(EVAL_SETS or tmp_path / "cache")
    return cfg


# What the workers of one session share (``_shared_between_workers``)
COMPOSITIONS: Path | None = None  # Hydra's compositions, pickled (``_composed``)
EVAL_SETS: Path | None = None  # the evaluation sets of the runs ``compose_config`` makes


@pytest.fixture(scope="session", autouse=True)
def _shared_between_workers(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A directory that the session's pytest-xdist workers share (the parent of each worker's
    base directory, as pytest-xdist's docs do it), for two caches whose writers are atomic:
    - ``COMPOSITIONS``: a composition one worker made, read by the others (``_composed``);
    - ``EVAL_SETS``: one evaluation-set cache (``paths.cache_dir``) for every run
      ``compose_config`` makes, as a user's runs share ``.cache/pelab``: a set is keyed by
      everything that changes its data and written under a file lock (``pelab.data.eval_sets``),
      so runs of one task read the sets the first built (a set built and written costs ~50 ms,
      one read ~6 ms; a tiny run uses ~10). A test of the cache itself names its own directory.
    """
    global COMPOSITIONS, EVAL_SETS
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    COMPOSITIONS, EVAL_SETS = shared / "compositions", shared / "eval_sets"
    COMPOSITIONS.mkdir(exist_ok=True)
    yield
    COMPOSITIONS = EVAL_SETS = None


@pytest.fixture
def tiny_cfg(tmp_path: Path):
    """A factory: ``tiny_cfg("pe=alibi", ...)`` -> a tiny, CSV-logged config in ``tmp_path``."""

    def make(*overrides: str) -> DictConfig:
        return compose_config([*TINY, "logger=csv", *overrides], tmp_path)

    yield make
    GlobalHydra.instance().clear()


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return Path(__file__).resolve().parents[1]
