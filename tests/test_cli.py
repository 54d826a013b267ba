"""The real command line, in subprocesses: sweeps through Hydra's launchers, a failing job, the
table of a sweep, each app's --help; and, in-process, a sweep refused before any job. (Every
task is run in-process by the task tests.) Every test here that starts a process is marked
``integration``."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hydra.errors import InstantiationException

from pelab import cli as pelab_cli
from pelab.errors import ConfigError
from pelab.pe import PE_REGISTRY
from tests import zygote
from tests.conftest import compose_config
from tests.hydra_plugins.test_checked_sweeper import sweeper
from tests.reliability.runs import SWEEP_ENV, fault

TINY = [
    "model.net.d_model=16",
    "model.net.n_heads=2",
    "model.net.n_layers=1",
    "trainer.max_steps=2",
    "trainer.val_check_interval=1",
    "task.n_val=4",
    "task.n_test=4",
    "data.batch_size=4",
    "data.eval_batch_size=4",
]
ENV = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
HOOKS_ENV = {**os.environ, **SWEEP_ENV}  # and the tests' hooks importable in every process


def cli(
    repo_root: Path,
    *args: str,
    timeout: int = 600,
    cwd: Path | None = None,
    fresh: bool = False,
    env: dict[str, str] = ENV,
) -> subprocess.CompletedProcess:
    """``python <args>`` with the repository's scripts, in ``cwd`` (default: the repository),
    forked from the tests' pre-imported Python (``tests.zygote``); ``fresh``: a new interpreter
    (a test of the start itself, ``-X importtime``); ``env``: ``HOOKS_ENV`` for a run given a
    test hook (``fault``)."""
    args = tuple(str(repo_root / a) if a.startswith("scripts/") else a for a in args)
    return zygote.run(list(args), cwd=cwd or repo_root, env=env, timeout=timeout, fresh=fresh)


def results(sweep: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in sweep.glob("*/results.json")}


def by_run(sweep: Path) -> dict[str, str]:
    """Each job's status by its directory's name without its key: ``none_copy_s0``."""
    return {name.rsplit("_", 1)[0]: r["status"] for name, r in results(sweep).items()}


# One encoding per behaviour of a sweep over encodings on copy: a 1-D encoding trains; one that
# indexes digits (copy has none) and one that reads 2-D positions are refused before any job runs.
# Every encoding runs in-process (tests/test_members.py, tests/test_configs.py, tests/pe/): a new
# one adds no job here.
SWEEP_PES = {"rope": "completed", "abacus": "digits", "rope_2d": "2-D"}


def test_encodings_that_cannot_read_the_task_refuse_the_sweep_before_any_job(tmp_path):
    """Encodings on copy with the parallel launcher, through the default (checked) sweeper,
    in-process: the one that indexes digits (abacus: tasks with numbers) and the 2-D one (grid
    tasks only) refuse the whole sweep, one line each, with the message the command prints
    after ``Error:`` (exit 1, no traceback: ``pelab.cli.run_script``), before any job is launched
    and before the sweep directory is made."""
    encodings = sorted(SWEEP_PES)
    digits = {pe for pe in encodings if PE_REGISTRY[pe].needs_digit_tokens}
    flat = {pe for pe in encodings if PE_REGISTRY[pe].position_dims in (None, 1)} - digits
    assert flat == {"rope"} and digits == {"abacus"}  # the others read 2-D positions: rope_2d
    checked = sweeper(tmp_path, "hydra/launcher=parallel")
    with pytest.raises(ConfigError) as refused:
        checked.sweep([f"pe={','.join(encodings)}", "task=copy", *TINY])
    lines = pelab_cli.user_message(refused.value).splitlines()
    assert lines[0] == "2 of 3 jobs of this sweep are refused, so none ran:"
    assert re.match(r"  #0 pe=abacus: .*task=copy declares no digit tokens", lines[1])
    assert re.match(r"  #2 pe=rope_2d: .*reads 2-D positions but the task gives 1-D", lines[2])
    assert len(lines) == 3  # rope (#1) is not refused
    assert checked.launcher.batches == []  # no job launched
    assert not (tmp_path / "sweep").exists()  # no sweep directory left behind


@pytest.mark.processes
@pytest.mark.integration
def test_a_parallel_sweep_records_a_job_failing_at_run_time_and_completes_the_other(
    tmp_path, repo_root
):
    """rope on copy, seeds 0 and 1, with the parallel launcher (a process per job): seed 0 trains
    and logs to W&B; seed 1 raises at its second step (an injected fault, a failure no check
    before the sweep can see), is recorded failed with its error, and the sweep exits 1."""
    sweep = tmp_path / "sweep"
    proc = cli(
        repo_root,
        "scripts/train.py",
        "-m",
        "hydra/launcher=parallel",
        "pe=rope",
        "seed=0,1",
        "task=copy",
        *TINY,
        *fault("raise", 1, seed=1),
        f"hydra.sweep.dir={sweep}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        env=HOOKS_ENV,
    )
    runs = results(sweep)
    statuses = by_run(sweep)
    assert statuses == {"rope_copy_s0": "completed", "rope_copy_s1": "failed"}, proc.stderr[-3000:]
    for name, res in runs.items():
        assert name.rsplit("_", 1)[0] == f"rope_copy_s{res['config']['seed']}"
        if res["status"] == "completed":
            assert list((sweep / name / "wandb").glob("offline-run-*/*.wandb")), name
        else:
            assert "RuntimeError: injected fault at step 1" in res["error"]
    groups = {r["config"]["logger"]["wandb"]["group"] for r in runs.values()}
    assert len(groups) == 1 and groups.pop().startswith("train-")  # one W&B group: the sweep
    assert proc.returncode == 1
    assert re.search(r"failed: rope_copy_s1_\w{8}: RuntimeError: injected fault", proc.stderr)
    assert "1 of 2 jobs did not complete" in proc.stderr


@pytest.fixture(scope="module")
def tiny_grid(tmp_path_factory, repo_root):
    """A 2 encodings x 2 seeds sweep whose seed-1 jobs fail at their second step (an injected
    fault: every job passes the sweep's check), then ``make_table.py --wandb`` on it, W&B
    offline."""
    tmp = tmp_path_factory.mktemp("grid")
    sweep = tmp / "sweep"
    train = cli(
        repo_root,
        "scripts/train.py",
        "-m",
        "pe=alibi,rope",
        "seed=0,1",
        *TINY,
        *fault("raise", 1, seed=1),
        "logger=csv",
        f"hydra.sweep.dir={sweep}",
        f"paths.cache_dir={tmp / 'cache'}",
        env=HOOKS_ENV,
    )
    table = cli(repo_root, "scripts/make_table.py", str(sweep), "--wandb")
    return sweep, train, table


@pytest.mark.processes
@pytest.mark.integration
def test_a_failing_job_is_recorded_and_the_sweep_goes_on_and_exits_1(tiny_grid):
    sweep, train, _ = tiny_grid
    assert by_run(sweep) == {
        "alibi_copy_s0": "completed",
        "alibi_copy_s1": "failed",
        "rope_copy_s0": "completed",
        "rope_copy_s1": "failed",
    }
    assert train.returncode == 1
    assert "4 jobs: 2 completed, 2 failed" in train.stderr
    for pe in ("alibi", "rope"):
        assert re.search(
            rf"failed: {pe}_copy_s1_\w{{8}}: RuntimeError: injected fault at step 1", train.stderr
        ), pe


METRICS = ("exact_match", "token_acc")


@pytest.mark.processes
@pytest.mark.integration
def test_the_table_of_a_sweep_has_every_run_and_shows_the_failed_ones(tiny_grid):
    sweep, _, table = tiny_grid
    assert table.returncode == 0, table.stderr[-3000:]
    out = sweep / "summary"
    cells = pd.read_csv(out / "table_tasks.csv")
    assert list(cells["pe"].unique()) == ["alibi", "rope"]
    assert sorted(cells["metric"].unique()) == list(METRICS)  # both metrics, side by side
    assert len(cells) == 2 * 2 * 2  # encodings x (ID, OOD) x metrics
    assert (cells["runs"] == 2).all()  # 2 seeds planned per cell, the failed one included
    assert (cells["n"] == 1).all() and (cells["failed"] == 1).all()  # seed 1 failed everywhere
    markdown = (out / "table_tasks.md").read_text()
    assert markdown in table.stdout
    for pe in ("alibi", "rope"):
        row = next(line for line in markdown.splitlines() if line.startswith(f"| {pe} "))
        assert row.count("(1/2") == len(METRICS), row  # the ID cell of each metric: 1 of 2 seeds
        assert f"{pe} · copy · seed 1: failed: RuntimeError" in markdown
    assert "copy ID exact match" in markdown and "copy ID token acc" in markdown
    for metric in METRICS:
        alone = (out / f"table_tasks.{metric}.md").read_text()
        assert alone.count("(1/2") == 2, metric  # one ID cell per encoding, once per metric
    names = ["table_lengths.csv", "table_tasks.tex"]
    names += [
        f"{fig}.{m}.{ext}"
        for fig in ("length_curves", "heatmap")
        for m in METRICS
        for ext in ("png", "pdf")
    ]
    for name in names:
        assert (out / name).stat().st_size > 0, name
    assert list((out / "wandb").glob("offline-run-*/*.wandb"))  # the summary, logged to W&B


@pytest.mark.processes
@pytest.mark.integration
def test_a_single_failing_run_exits_1_with_its_error(tmp_path, repo_root):
    proc = cli(
        repo_root,
        "scripts/train.py",
        "pe=rope",
        "model.net.d_model=18",
        "model.net.n_heads=2",
        "logger=csv",
        f"hydra.run.dir={tmp_path / 'run'}",
        timeout=300,
    )
    assert proc.returncode == 1
    assert "Error: " in proc.stderr and "head_dim=9" in proc.stderr
    assert "Traceback" not in proc.stderr  # one line (pelab.cli)
    assert not (tmp_path / "run").exists()  # refused before training: no run directory left


GROUPS = "task: addition, associative_recall"  # --help's list of the config groups


@pytest.mark.processes
@pytest.mark.integration
@pytest.mark.parametrize(
    ("command", "names"),
    [
        (
            ["scripts/train.py", "--help", "pe=alibi"],
            ["pelab train", "pe=alibi  task=copy", "experiment=", "seed=0", "rope", GROUPS],
        ),
        (
            ["scripts/eval.py", "--help"],
            ["pelab eval", "ckpt_path", "pe.<option>", "task.eval_lengths", "trainer=gpu"],
        ),
        (
            ["scripts/inspect_pe.py", "--help", "length=8"],
            ["pelab inspect_pe", "length=8", "out_dir=", "wandb=true|false", "pe=rope", GROUPS],
        ),
    ],
)
def test_help_names_pelabs_groups_and_keys_with_the_current_values(repo_root, command, names):
    proc = cli(repo_root, "-X", "importtime", *command, timeout=120, fresh=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in names:
        assert name in proc.stdout, name
    assert f"python {command[0]} -sc install=bash" in proc.stdout  # tab completion
    assert not imported(HEAVY, proc.stderr)  # --help answers before torch loads (issue 35)


HEAVY = ("torch", "lightning")  # seconds to import: --help and a mistake answer without them


def imported(modules: tuple[str, ...], importtime: str) -> list[str]:
    """Which of ``modules`` a process imported, from its ``python -X importtime`` report."""
    return [m for m in modules if re.search(rf"\|\s+{m}$", importtime, re.M)]


@pytest.mark.processes
@pytest.mark.integration
def test_a_bad_choice_fails_fast_with_the_valid_options(repo_root):
    bad_choice = ("scripts/train.py", "pe=rotary")
    proc = cli(repo_root, "-X", "importtime", *bad_choice, timeout=120, fresh=True)
    assert proc.returncode == 1
    assert not imported(HEAVY, proc.stderr)
    assert "Error: pe=rotary is not an option of pe; valid choices: abacus, alibi, " in proc.stderr
    assert "rope" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["model.optimzer.lr=1"],
            r"^model.optimzer is not a key of model; did you mean optimizer\?; valid keys: "
            r"compile, kind, net, optimizer, schedule "
            r"\(\+model.optimzer=<value> adds a new key\)$",
        ),
        (
            ["pe=rotary"],
            r"^pe=rotary is not an option of pe; valid choices: abacus, alibi, .*rope, ",
        ),
        (["model.net.d_model=["], r"no viable alternative at input '\['"),
    ],
)
def test_a_mistake_hydra_finds_is_one_line_with_the_valid_choices(overrides, message):
    with pytest.raises(Exception) as raised:
        compose_config(overrides)
    assert re.search(message, pelab_cli.user_message(raised.value))


def test_a_config_error_is_reported_through_hydras_wrapping_and_a_bug_is_not():
    try:
        try:
            raise ConfigError("pe.base=-1 is out of range")
        except ConfigError as error:
            raise InstantiationException("Error in call to target 'RotaryPE'") from error
    except InstantiationException as wrapped:
        assert pelab_cli.user_message(wrapped) == "pe.base=-1 is out of range"
    assert pelab_cli.user_message(RuntimeError("a bug")) is None


@pytest.mark.processes
@pytest.mark.faults
@pytest.mark.integration
def test_a_bad_setting_ends_the_script_with_one_line_and_no_traceback(tmp_path, repo_root):
    """Status 1, one ``Error:`` line naming the value and what is valid, no traceback (Hydra
    would print a partial one); ``HYDRA_FULL_ERROR=1`` shows it."""
    args = ["scripts/train.py", "model.optimizer.lr=fast", f"hydra.run.dir={tmp_path / 'run'}"]
    proc = cli(repo_root, *args, *TINY, "logger=none")
    assert proc.returncode == 1
    assert "Error: model.optimizer.lr='fast' has the wrong type: expected float" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()  # refused before training: no run directory left
    env = {**ENV, "HYDRA_FULL_ERROR": "1"}
    full = subprocess.run(
        [sys.executable, str(repo_root / args[0]), *args[1:], *TINY, "logger=none"],
        cwd=repo_root,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert full.returncode == 1 and "Traceback" in full.stderr and "check_types" in full.stderr
