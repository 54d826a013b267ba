import os
import shlex
import socket
import time
from fnmatch import fnmatch
from pathlib import Path

import pytest
import wandb
from click.testing import CliRunner
from lightning.pytorch.loggers import WandbLogger
from omegaconf import OmegaConf
from wandb.cli import cli as wandb_cli

from pelab.train import train
from pelab.trainer import run_loggers
from pelab.utils import wandb_mode as wandb_mode_module
from pelab.utils.wandb_mode import (
    SYNC_COMMAND,
    SYNC_HINT,
    run_id,
    unreachable,
    wandb_choice,
    wandb_mode,
)


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No W&B settings from the machine; the W&B server answers (see the probe's own tests)."""
    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "no-config"))
    monkeypatch.setattr(wandb_mode_module, "unreachable", lambda url: None)
    return tmp_path / "netrc"


@pytest.fixture
def listening_server():
    """A local TCP server that accepts connections (the kernel completes them)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    server.close()


def test_the_probe_finds_a_server_that_answers_and_names_one_that_does_not(listening_server):
    unreachable.cache_clear()
    assert unreachable(listening_server) is None
    failure = unreachable("http://wandb.invalid")  # a reserved name: never resolves
    assert failure.startswith("gaierror") or failure.startswith("no answer within")


@pytest.mark.faults
def test_a_probe_that_hangs_is_given_up_on_in_bounded_time(monkeypatch):
    unreachable.cache_clear()

    def hang(*args, **kwargs):
        time.sleep(5)
        raise TimeoutError("answered too late")  # the probe's thread ends quietly, later

    monkeypatch.setattr(socket, "create_connection", hang)
    start = time.monotonic()
    assert unreachable("http://api.example", timeout_s=0.3) == "no answer within 0.3 s"
    assert time.monotonic() - start < 2


@pytest.mark.faults
def test_online_without_a_server_that_answers_logs_offline_and_says_why(monkeypatch, tmp_path):
    """Credentials but no network: W&B itself would wait ~90 s; pelab logs offline at once."""
    unreachable.cache_clear()
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_BASE_URL", "http://wandb.invalid")
    mode, why = wandb_choice()
    assert mode == "offline"
    assert why.startswith("set by $WANDB_MODE, but the W&B server http://wandb.invalid does not")
    assert why.endswith(f"logging offline; {SYNC_HINT}")


def test_wandb_is_offline_without_credentials_and_says_how_to_upload_later(clean_env):
    mode, why = wandb_choice()
    assert mode == "offline" and why.endswith(SYNC_HINT)
    assert "`make sync`" in SYNC_HINT and f"`{SYNC_COMMAND}`" in SYNC_HINT


def offline_run(
    wandb_dir: Path, run: str, synced: bool = False, mode: str = "offline-run"
) -> None:
    """A run directory as W&B leaves it: ``<mode>-<time>-<id>/run-<id>.wandb`` (and the marker
    ``wandb sync`` adds once it has uploaded the run)."""
    run_dir = wandb_dir / f"{mode}-20261127_120000-{run}"
    run_dir.mkdir(parents=True)
    (run_dir / f"run-{run}.wandb").write_bytes(b"")
    if synced:
        (run_dir / f"run-{run}.wandb.synced").write_bytes(b"")


def test_the_printed_sync_command_finds_every_offline_run_not_yet_uploaded(tmp_path, monkeypatch):
    """``SYNC_COMMAND`` from the directory holding ``logs/``: its ``find`` (run here as Python
    walks the tree: directories by name, symlinks not followed) hands ``wandb sync`` (run
    in-process, ``--dry-run``: no upload) every offline run; W&B skips the one it uploaded."""
    find, root, *select, null, pipe, sort, z, pipe2, xargs, flags, program, sync = shlex.split(
        SYNC_COMMAND
    )
    assert (find, select, null) == ("find", ["-type", "d", "-name", select[-1]], "-print0")
    # oldest first: a resumed run's attempts (one id) continue its W&B run in order
    assert (pipe, sort, z, pipe2, xargs, flags) == ("|", "sort", "-z", "|", "xargs", "-0r")
    assert (program, sync) == ("wandb", "sync")
    logs = tmp_path / root
    offline_run(logs / "train/runs/2026-11-27_12-00-00/wandb", "fresh001")
    offline_run(logs / "train/multiruns/2026-11-27_12-00-00/0/wandb", "synced01", synced=True)
    offline_run(logs / "eval/runs/2026-11-27_12-00-00/wandb", "online01", mode="run")
    found = sorted(
        os.path.relpath(folder, tmp_path)
        for folder, _, _ in os.walk(logs)
        if fnmatch(os.path.basename(folder), select[-1])
    )
    monkeypatch.chdir(tmp_path)
    # the CLI's report is what is checked: a silent run earlier in this process (the suite's
    # WANDB_SILENT) left W&B's console silent, as a fresh `wandb sync` process never is
    monkeypatch.setattr(wandb.errors.term, "_silent", False)
    result = CliRunner().invoke(wandb_cli.sync, ["--dry-run", *found])
    assert result.exit_code == 0, result.output
    assert "Would sync 1 run(s)" in result.output and "run-fresh001.wandb" in result.output
    assert "Skipped 1 synced run(s)" in result.output and "online01" not in result.output


def test_make_sync_runs_the_printed_command_with_the_venvs_wandb(repo_root):
    makefile = (repo_root / "Makefile").read_text()
    phony = next(line for line in makefile.splitlines() if line.startswith(".PHONY:"))
    recipe = makefile.split("\nsync: install ## ", 1)[1].split("\n\n", 1)[0]
    assert "sync" in phony.split()
    assert SYNC_COMMAND.replace("wandb sync", "$(VENV)/bin/wandb sync") in recipe


def test_a_run_directory_keeps_its_wandb_run_id(tmp_path, monkeypatch):
    """The id a resumed run passes to W&B: the one kept in its directory; a new directory gets a
    new one; ``$WANDB_RUN_ID`` (a W&B sweep agent's) wins and is kept."""
    monkeypatch.delenv("WANDB_RUN_ID", raising=False)
    first = run_id(tmp_path / "run")
    assert len(first) == 8 and first.isalnum() and first == first.lower()
    assert (tmp_path / "run" / "wandb" / "run_id").read_text() == first + "\n"
    assert run_id(tmp_path / "run") == first
    assert run_id(tmp_path / "other") != first
    monkeypatch.setenv("WANDB_RUN_ID", "agent123")
    assert run_id(tmp_path / "swept") == "agent123"
    monkeypatch.delenv("WANDB_RUN_ID")
    assert run_id(tmp_path / "swept") == "agent123"


def test_wandb_goes_online_after_login(clean_env):
    clean_env.write_text("machine api.wandb.ai\n  login user\n  password abc123\n")
    assert wandb_mode() == "online"


def test_wandb_online_with_an_api_key_and_explicit_mode_wins(clean_env, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "abc")
    assert wandb_mode() == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode() == "disabled"


def test_a_broken_netrc_means_offline_not_a_crash(clean_env):
    clean_env.write_text("machine\n")
    assert wandb_mode() == "offline"


def test_every_source_w_and_b_reads_credentials_from_counts_and_is_named(
    clean_env, monkeypatch, tmp_path
):
    """Besides the API key and ``.netrc``: an identity token file and W&B's settings file
    (``api_key`` under ``[default]``); the reason names the source."""
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "config"))
    assert wandb_choice()[0] == "offline" and "wandb sync" in wandb_choice()[1]
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "settings").write_text("[default]\napi_key = abc123\n")
    mode, why = wandb_choice()
    assert mode == "online" and "settings holds an api_key" in why
    (tmp_path / "config" / "settings").write_text("[default]\nentity = me\n")
    assert wandb_mode() == "offline"
    monkeypatch.setenv("WANDB_IDENTITY_TOKEN_FILE", str(tmp_path / "token"))
    assert wandb_choice() == ("online", "W&B credentials found: $WANDB_IDENTITY_TOKEN_FILE is set")
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert wandb_choice() == ("offline", "set by $WANDB_MODE")


@pytest.mark.integration
def test_the_run_says_which_mode_it_chose_and_why(tiny_cfg, caplog):
    with caplog.at_level("INFO", logger="pelab.trainer"):
        train(tiny_cfg("logger=wandb"))
    assert "W&B: offline mode (set by $WANDB_MODE)" in caplog.text


@pytest.mark.integration  # W&B starts its service process
def test_a_resumed_run_continues_its_wandb_run(tmp_path, monkeypatch):
    """Two attempts in one run directory (interrupted, then resumed with ``hydra.run.dir``) log
    to one W&B run: both offline-run directories carry the same id; another directory gets
    another run."""
    monkeypatch.delenv("WANDB_RUN_ID", raising=False)

    def attempt(run_dir: Path) -> str:
        wandb_logger = {"_target_": f"{WandbLogger.__module__}.WandbLogger", "mode": "offline"}
        logger = {"wandb": {**wandb_logger, "save_dir": str(run_dir), "project": "pelab"}}
        cfg = OmegaConf.create({"seed": 0, "logger": logger})
        [started] = run_loggers(cfg, {"total": 1}, [])
        started_id = started.experiment.id
        wandb.finish(exit_code=1)
        return started_id

    first, resumed = attempt(tmp_path / "run"), attempt(tmp_path / "run")
    assert first == resumed
    logs = sorted((tmp_path / "run" / "wandb").glob("offline-run-*/*.wandb"))
    assert [log.name for log in logs] == [f"run-{first}.wandb"] * 2  # one per attempt
    assert attempt(tmp_path / "another run") != first
