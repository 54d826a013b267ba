"""The README's commands, as a new user types them (issue 35, item 3).

Every command in the README's code blocks and inline code is found and checked, after a tiny
stand-in for ``make train`` (``TINY``), in a fresh working directory:

- the cheap ones run verbatim, in-process (``scripts/*.py`` through ``runpy``): ``--help`` and
  completion, ``make_table.py``, ``eval.py`` with RoPE scaling, ``inspect_pe.py``; ``<run dir>``
  is the tiny run, ``<date>_<time>`` and ``<your sweep>`` its sweep;
- the training commands, minutes to hours each, are composed job by job (``-m`` and a preset's
  sweep expanded) and pass every check a run makes before it trains;
- a ``make`` target must exist in the Makefile; the benchmark and the GPU check have their own
  tests (``tests/test_benchmark.py``, ``tests/test_gpu_check.py``).

A command none of these rules covers fails ``test_every_readme_command_is_checked``.
"""

from __future__ import annotations

import re
import runpy
import shlex
import shutil
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import TINY
from tests.readme_rows import not_shipped, readme_names

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"

CODE_BLOCK = re.compile(r"```bash\n(.*?)```", re.S)
FENCED = re.compile(r"```.*?```", re.S)  # every block, bash or output
INLINE = re.compile(r"`([^`]+)`")  # may wrap a line
BARE_SCRIPT = re.compile(r"^(\w+\.py) ")  # `make_table.py <your sweep> ...`: scripts/<name>
SHELL_WRAPPER = re.compile(r'^eval "\$\((.*)\)"$')  # eval "$(python scripts/train.py -sc ...)"
CHECKED_ELSEWHERE = {"scripts/benchmark.py", "scripts/gpu_check.py"}
TRAINING = "scripts/train.py"
CHEAP_FLAGS = {"--help", "-sc", "--cfg"}


def readme_commands(text: str) -> list[str]:
    """Every ``python ...`` and ``make ...`` command of the README, once, in order: the lines of
    its ``bash`` blocks (comments dropped) and its inline code."""
    found: list[str] = []
    for block in CODE_BLOCK.findall(text):
        for line in block.splitlines():
            found.append(line.split("  #")[0].split(" # ")[0].strip())
    prose = FENCED.sub("", text)
    found += [" ".join(span.split()) for span in INLINE.findall(prose)]
    commands = []
    for command in found:
        command = SHELL_WRAPPER.sub(r"\1", command.strip())
        if BARE_SCRIPT.match(command) and (REPO / "scripts" / command.split()[0]).is_file():
            command = "python scripts/" + command
        if command.startswith(("python ", "make ")) and command not in commands:
            commands.append(command)
    return commands


def kind(command: str) -> str:
    """How ``command`` is checked: ``make``, ``elsewhere``, ``run`` or ``composed``."""
    words = shlex.split(command)
    if words[0] == "make":
        return "make"
    script = words[1]
    if script in CHECKED_ELSEWHERE:
        return "elsewhere"
    if script == TRAINING and not CHEAP_FLAGS & set(words):
        return "composed"
    return "run"


COMMANDS = readme_commands(README.read_text())


def test_the_readme_has_commands_of_every_kind():
    kinds = {kind(c) for c in COMMANDS}
    assert kinds == {"make", "elsewhere", "run", "composed"}, kinds
    assert "python scripts/train.py --help" in COMMANDS
    assert any(c.startswith("python scripts/eval.py ckpt_path=<run dir>") for c in COMMANDS)


def test_every_readme_command_is_checked():
    """Every command maps to a check below: a new kind of command fails here until it has one."""
    for command in COMMANDS:
        words = shlex.split(command)
        assert words[0] in {"python", "make"}, command
        if words[0] == "python":
            assert (REPO / words[1]).is_file(), f"{command}: no such script"


@pytest.mark.parametrize("command", [c for c in COMMANDS if kind(c) == "make"])
def test_a_make_target_the_readme_names_exists(command):
    targets = set(re.findall(r"^([a-z-]+):", (REPO / "Makefile").read_text(), re.M))
    for word in shlex.split(command)[1:]:
        if "=" not in word:
            assert word in targets, f"{command}: no target {word} in the Makefile"


# ``make train``'s stand-in: the default run's settings but a tiny model and budget
# (``tests.conftest.TINY``), as a sweep of two encodings, so the README's sweep commands have one
MAKE_TRAIN = "python scripts/train.py -m pe=rope,alibi " + " ".join([*TINY, "logger=csv"])


def run_script(command: str) -> int:
    """``command`` (``python scripts/<x>.py ...``) in this process, as its shell would run it;
    its exit status."""
    words = shlex.split(command)
    script = str(REPO / words[1])
    argv = sys.argv
    sys.argv = [script, *words[2:]]
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exit_:
        return 0 if exit_.code is None else exit_.code if isinstance(exit_.code, int) else 1
    finally:
        sys.argv = argv
    return 0


@dataclass
class Workspace:
    """A fresh working directory after the tiny ``make train``: its sweep, one of its runs, and
    ``<your sweep>`` of ``experiment=ablation_cpu pe=<yours>`` (the shipped DAPE records)."""

    where: Path
    sweep: Path
    run_dir: Path
    your_sweep: Path

    def fill_in(self, command: str) -> str:
        """``command`` with its placeholders filled in: ``<run dir>``, the sweeps."""
        command = command.replace("<run dir>", str(self.run_dir))
        command = command.replace("<your sweep>", str(self.your_sweep))
        return re.sub(r"logs/\w+/multiruns/<date>_<time>", str(self.sweep), command)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    where = tmp_path_factory.mktemp("fresh_clone")
    your_sweep = where / "your_sweep"
    for job in (REPO / "baselines/ablation_cpu").glob("dape_*"):
        shutil.copytree(job, your_sweep / job.name)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(where)
        assert run_script(MAKE_TRAIN) == 0
        (sweep,) = (where / "logs/train/multiruns").iterdir()
        run_dir = next(p for p in sweep.iterdir() if p.name.startswith("rope_"))
        yield Workspace(where, sweep, run_dir, your_sweep)


# what a command leaves, beyond its exit status 0 and no error: a path (glob) under the workspace
LEAVES = {
    "scripts/eval.py": "{run_dir}/eval/*/results.json",
    "scripts/inspect_pe.py pe=t5_bias": "logs/inspect/t5_bias/*_illustrative.png",
    "scripts/inspect_pe.py ckpt_path": "{run_dir}/inspect/*.png",
    "scripts/make_table.py logs/": "{sweep}/summary/report.html",
    "scripts/make_table.py <your sweep>": "{your_sweep}/summary/report.html",
}


@pytest.mark.integration
@pytest.mark.parametrize("command", [c for c in COMMANDS if kind(c) == "run"])
def test_a_cheap_readme_command_runs_verbatim(command, workspace, capsys):
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(workspace.where)
        status = run_script(workspace.fill_in(command))
    out, err = capsys.readouterr()
    assert status == 0, f"{command}\n{out[-2000:]}\n{err[-2000:]}"
    assert "Error" not in err, err[-2000:]
    for start, pattern in LEAVES.items():
        if command.startswith(f"python {start}") and "--list" not in command:
            found = pattern.format(**vars(workspace)).removeprefix(f"{workspace.where}/")
            assert list(workspace.where.glob(found)), f"{command} left no {pattern}"


@pytest.mark.integration
@pytest.mark.parametrize("command", [c for c in COMMANDS if kind(c) == "composed"])
def test_a_training_command_of_the_readme_composes_and_passes_every_check(
    command, tmp_path, monkeypatch
):
    """The command verbatim through the real command line, with each job's training replaced by
    the checks its run makes before the first step (``check_training_job``): a single run's
    in its job, a sweep's in the checked sweeper, for every job before the first would launch
    (no job launches, and no run is summed up)."""
    from hydra.core.plugins import Plugins

    import pelab.train
    from hydra_plugins.pelab_launcher.checked_sweeper import check_training_job
    from pelab.analysis.sweep import SweepSummary
    from tests.hydra_plugins.test_checked_sweeper import RecordingLauncher

    checked, launcher = [], RecordingLauncher()
    monkeypatch.setattr(pelab.train, "main", lambda cfg: checked.append(check_training_job(cfg)))
    monkeypatch.setattr(Plugins, "instantiate_launcher", lambda *args, **kwargs: launcher)
    monkeypatch.setattr(SweepSummary, "on_multirun_end", lambda *args, **kwargs: None)
    monkeypatch.chdir(tmp_path)
    assert run_script(command) == 0, command
    assert checked or launcher.batches, f"{command}: no job was checked"


def test_the_components_table_lists_every_registered_encoding_and_task():
    """Issue 46: the list drifted (pope, grape_m, grape_a, indirect_indexing were missing);
    the registries decide what it must hold, every task config file included, and it names
    nothing unregistered. Issue 54: an encoding not yet shipped (in no baseline: a user's new
    one, its module, config and test alone) is reported, not failed."""
    from pelab.analysis import baseline
    from pelab.pe import PE_REGISTRY
    from pelab.tasks import TASK_REGISTRY

    files = {p.stem for p in (REPO / "configs" / "task").glob("*.yaml")}
    in_baseline = {r["choices"]["pe"] for r in baseline.load("ablation_cpu")}
    for group, names in (("pe", set(PE_REGISTRY)), ("task", set(TASK_REGISTRY) | files)):
        row = readme_names(group)
        assert row <= names, f"README's {group}= row names unregistered {sorted(row - names)}"
        missing = names - row
        if group == "pe":
            new = sorted(missing - in_baseline)
            if new:
                warnings.warn(not_shipped(new), stacklevel=1)
            missing &= in_baseline
        assert not missing, f"README's {group}= row lacks {sorted(missing)}"


def test_the_readme_fits_a_first_read_and_leaves_timings_to_the_performance_page():
    """At most 250 lines; no time or test count in its prose (they go stale with every
    session: docs/performance.md holds them, each with its command, machine and date). Code
    blocks and inline code (what a command prints, a budget it takes) are not prose."""
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    prose = re.sub(r"`[^`]*`", "", prose)
    unit = r"(?:s|ms|min|minutes?|seconds?|h|hours?)"
    found = re.findall(rf"\b\d+(?:\.\d+)?\s?{unit}\b|\b\d+ tests\b", prose)
    assert not found, f"timings or test counts in the README: {found}"
