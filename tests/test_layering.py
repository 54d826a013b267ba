"""The import rules of the package and its Hydra plugins: no import cycle; shared names live in
leaf modules, tasks know no encoding or model, results analysis knows no model, reliability knows
no LightningModule, only the modules that build or describe an encoding import ``pelab.pe``, and
the plugins (``hydra_plugins``) may import pelab but pelab never imports them. Read from the
source (every ``import``, at any depth), not at run time."""

import ast
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SOURCE / "pelab"
PLUGINS = SOURCE / "hydra_plugins"

# outside pelab.pe, the modules that build or describe an encoding, and why
ENCODING_USERS = {
    "pelab.models.attention": "calls the hooks of the encoding interface",
    "pelab.models.transformer": "builds the encoding from the model's dimensions",
    "pelab.models.encoder_decoder": "builds one encoding for the encoder, one for the decoder",
    "pelab.models.dims": "reads the encodings' ModelDims off the network's NetDims",
    "pelab.models.stacked": "finds the encodings of a network to stack them",
    "pelab.models.form": "leaves an encoding's parameters to it and reads what it adds to tokens",
    "pelab.models.member_encodings": "stacks an encoding's parameters and runs its hooks",
    "pelab.assembly": "registers the encodings and builds the run's model",
    "pelab.inspect.inspect_pe": "builds encodings to draw what they compute",
    "pelab.inspect.encoding_figures": "computes what an encoding adds, to draw it",
    "pelab.inspect.untrained": (
        "gives an untrained encoding's constant parameters illustrative values"
    ),
}
LEAVES = ("pelab.errors", "pelab.tokens", "pelab.devices")
MODEL_SIDE = ("pelab.pe", "pelab.models", "pelab.model_kinds", "pelab.lit_module", "pelab.train")
MODEL_SIDE += ("pelab.assembly",)
MODEL_SIDE += (
    "pelab.outcome",
    "pelab.recorder",
    "pelab.trainer",
    "pelab.evaluate",
    "pelab.preflight",
    "pelab.member_state",
    "pelab.member_optimization",
    "pelab.running_scores",
    "pelab.sizing",
    "pelab.trained",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """Every ``pelab`` or ``hydra_plugins`` module ``path`` imports, anywhere in the file."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
    return {n for n in names if within(n, ("pelab", "hydra_plugins"))}


def within(name: str, prefixes: tuple[str, ...] | str) -> bool:
    prefixes = (prefixes,) if isinstance(prefixes, str) else prefixes
    return any(name == p or name.startswith(f"{p}.") for p in prefixes)


SOURCES = sorted([*PACKAGE.rglob("*.py"), *PLUGINS.rglob("*.py")])
MODULES = {module_name(p): imported(p) for p in SOURCES}


def test_the_rules_see_the_package():
    assert {"pelab.errors", "pelab.tasks.copy", "pelab.analysis.collect"} <= set(MODULES)
    assert "pelab.pe.base" in MODULES["pelab.models.attention"]
    worker = MODULES["hydra_plugins.pelab_launcher.worker"]
    assert "hydra_plugins.pelab_launcher.job_config" in worker


@pytest.mark.parametrize("leaf", LEAVES)
def test_leaf_modules_import_no_pelab_module(leaf):
    assert MODULES[leaf] == set()


def test_only_the_modules_that_build_or_describe_an_encoding_import_pelab_pe():
    users = {
        name
        for name, imports in MODULES.items()
        if not within(name, "pelab.pe") and any(within(i, "pelab.pe") for i in imports)
    }
    assert users <= set(ENCODING_USERS), f"imports pelab.pe: {sorted(users - set(ENCODING_USERS))}"
    assert users >= set(ENCODING_USERS), f"no longer imports it: {set(ENCODING_USERS) - users}"


def test_tasks_know_no_encoding_model_or_layout():
    allowed = ("pelab.errors", "pelab.tokens", "pelab.lengths", "pelab.tasks")
    for name, imports in MODULES.items():
        if within(name, "pelab.tasks"):
            assert all(within(i, allowed) for i in imports), (name, sorted(imports))


def test_positions_and_metrics_know_no_model():
    for name in ("pelab.positions", "pelab.metrics", "pelab.record"):
        assert not any(within(i, MODEL_SIDE) for i in MODULES[name]), name


def test_results_analysis_knows_no_model():
    """No exception: drawing an encoding (which builds models) is ``pelab.inspect``."""
    for name, imports in MODULES.items():
        if within(name, "pelab.analysis"):
            wrong = sorted(i for i in imports if within(i, MODEL_SIDE))
            assert not wrong, f"{name} imports {wrong}"


def reach(name: str) -> set[str]:
    """Every module of the package and its plugins that importing ``name`` imports, at any
    depth (its own imports, theirs, ...; not the ``pelab`` package itself)."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        for i in MODULES[todo.pop()]:
            if i in MODULES and i != "pelab" and i not in seen:
                seen.add(i)
                todo.append(i)
    return seen


@pytest.mark.parametrize("name", sorted(n for n in MODULES if within(n, "pelab.reliability")))
def test_reliability_never_reaches_the_lightning_module_or_the_model_it_serves(name):
    """Checkpoints, callbacks and memory checks serve the LightningModule, at any depth: the
    names both use (the checkpoint format's keys) live in ``pelab.reliability`` (callbacks once
    imported ``SCORES_KEY`` from ``pelab.lit_module``; ``memory`` once built the job's model
    through ``pelab.assembly``, now ``pelab.sizing`` above both)."""
    wrong = sorted(i for i in reach(name) if within(i, ("pelab.lit_module", "pelab.assembly")))
    assert not wrong, f"{name} reaches {wrong}"


FOLDERS = sorted({n.rsplit(".", 1)[0] for n in MODULES if n.count(".") >= 2})


@pytest.mark.parametrize("folder", FOLDERS)
def test_no_import_runs_back_up_into_a_folder(folder):
    """A folder stands above all it imports, at any depth: nothing it reaches outside itself
    reaches back in (a circle between folders, which a check of modules misses: ``reliability``
    once imported ``assembly``, which imports ``reliability``)."""
    inside = {n for n in MODULES if within(n, folder)}
    outside = set().union(*(reach(n) for n in inside)) - inside
    back = sorted(f"{o} -> {i}" for o in outside for i in reach(o) & inside)
    assert not back, f"{folder} is reached back from: {back[:5]}"


def test_the_reach_sees_depth(monkeypatch):
    monkeypatch.setitem(MODULES, "pelab.errors", {"pelab.tokens"})
    assert "pelab.tokens" in reach("pelab.reliability.resume.lock")  # lock -> errors -> tokens


def test_pelab_never_imports_its_hydra_plugins():
    """The plugins launch and check pelab's jobs; pelab runs without them."""
    for name, imports in MODULES.items():
        if within(name, "pelab"):
            assert not any(within(i, "hydra_plugins") for i in imports), name


def loaded_at_import(path: Path) -> set[str]:
    """The modules ``path`` imports when it is imported: its top-level ``import`` statements
    (not those inside a function, nor under ``if TYPE_CHECKING:``)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
    return names


def third_party_at_import(start: str) -> dict[str, str]:
    """``{library: the pelab module importing it}`` for every library that importing ``start``
    loads: the pelab modules it reaches (with their packages' ``__init__``), then theirs."""
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    seen, todo, found = set(), [start], {}
    while todo:
        name = todo.pop()
        if name in seen or name not in paths:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # its packages' __init__
        for imported_name in loaded_at_import(paths[name]):
            if within(imported_name, "pelab"):
                todo.append(imported_name)
            else:
                found.setdefault(imported_name.split(".")[0], name)
    return found


@pytest.mark.parametrize("heavy", ["torch", "datasets", "lightning"])
def test_make_table_starts_without_torch_or_datasets(heavy):
    """``scripts/make_table.py`` reads results: it imports no model library (issue 27; it once
    loaded torch and ``datasets`` through ``pelab.metrics``' chance levels, now
    ``pelab.chance``, and through ``pelab.tasks``' ``expand_lengths``, now ``pelab.lengths``)."""
    loaded = third_party_at_import("pelab.analysis.report")
    assert "pandas" in loaded  # the walk sees the libraries that it does load
    assert heavy not in loaded, f"{loaded[heavy]} imports {heavy}"


def test_the_import_walk_can_fail():
    assert third_party_at_import("pelab.metrics").keys().isdisjoint({"torch", "datasets"})
    assert {"torch", "datasets"} <= third_party_at_import("pelab.chance").keys()


def cycle() -> list[str] | None:
    """An import cycle among the modules of pelab and its plugins (each ``import``, at any depth,
    of a module other than the ``pelab`` package itself), or None."""
    graph = {
        name: sorted(i for i in imports if i in MODULES and i not in ("pelab", name))
        for name, imports in MODULES.items()
    }
    state: dict[str, str] = {}

    def visit(name: str, path: list[str]) -> list[str] | None:
        state[name] = "open"
        for nxt in graph[name]:
            if state.get(nxt) == "open":
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[name] = "done"
        return None

    for name in graph:
        if name not in state and (found := visit(name, [name])):
            return found
    return None


def test_no_import_cycle_anywhere_in_the_package_or_its_plugins():
    """E.g. training and the members of a stack once imported each other (one inside a
    function): one path now, and assembly (task, model, data) in a module of its own; the
    parallel launcher and its worker imported each other for a job's config, now
    ``pelab_launcher.job_config``."""
    found = cycle()
    assert found is None, " -> ".join(found)


def test_the_cycle_check_can_fail(monkeypatch):
    monkeypatch.setitem(MODULES, "pelab.errors", {"pelab.tokens"})
    monkeypatch.setitem(MODULES, "pelab.tokens", {"pelab.errors"})
    assert cycle() is not None
