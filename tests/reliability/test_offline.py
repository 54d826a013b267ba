"""Without a network or W&B credentials nothing hangs or prompts; a W&B failure never costs the
local ``results.json``; offline runs are found by the printed ``wandb sync`` command."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import wandb
from lightning.pytorch.loggers import WandbLogger

from pelab.train import train
from pelab.utils.wandb_mode import SYNC_COMMAND, SYNC_HINT
from tests import zygote
from tests.reliability.runs import RESUMABLE, config, results

pytestmark = pytest.mark.faults  # the fault campaign: make test-faults

NO_NETWORK = "http://127.0.0.1:9"  # nothing listens there: every connection is refused


def offline_env(tmp_path) -> dict[str, str]:
    """The environment of a machine with no W&B login, no network and an empty home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    (tmp_path / "home").mkdir()
    return {
        **env,
        "HOME": str(tmp_path / "home"),
        "NETRC": str(tmp_path / "home" / "no-netrc"),
        "WANDB_BASE_URL": NO_NETWORK,
        **{proxy: NO_NETWORK for proxy in ("http_proxy", "https_proxy", "HTTP_PROXY")},
        "HTTPS_PROXY": NO_NETWORK,
    }


@pytest.mark.processes
@pytest.mark.integration
def test_no_network_and_no_credentials_never_hang_or_prompt(tmp_path, repo_root):
    out, env = tmp_path / "logs" / "train" / "runs" / "now", offline_env(tmp_path)
    cmd = ["scripts/train.py", *RESUMABLE, "logger=wandb", "trainer.max_steps=4"]
    cmd += [f"hydra.run.dir={out}", f"paths.cache_dir={tmp_path / 'cache'}"]
    # closed stdin: a prompt would fail; the timeout catches a hang
    proc = zygote.run(cmd, cwd=repo_root, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert results(out)["status"] == "completed"
    # the sync command the run printed (and the README gives), run by bash as written from the
    # directory holding logs/, finds the run (--dry-run: no upload)
    assert SYNC_HINT in proc.stdout + proc.stderr
    for doc in ("README.md", "docs/reliability.md"):
        assert SYNC_COMMAND in (repo_root / doc).read_text(), doc
    wandb_cli = os.path.join(os.path.dirname(sys.executable), "wandb")
    sync = subprocess.run(
        ["bash", "-c", SYNC_COMMAND.replace("wandb sync", f"{wandb_cli} sync --dry-run")],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert sync.returncode == 0 and "Would sync 1 run(s)" in sync.stdout + sync.stderr


@pytest.mark.integration
def test_wandb_failing_to_start_drops_the_logger_and_the_run_completes(tmp_path, monkeypatch):
    def unreachable(*args, **kwargs):
        raise wandb.errors.CommError("network is unreachable")

    monkeypatch.setattr(wandb, "init", unreachable)
    out = tmp_path / "run"
    [record] = train(config(tmp_path, out, "logger=wandb", "trainer.max_steps=4"))
    assert record["status"] == "completed" and record["metrics"]["test"]
    assert "WandbLogger failed to start" in record["warnings"][0]
    assert "network is unreachable" in record["warnings"][0]
    assert results(out)["status"] == "completed"


@pytest.mark.integration
def test_wandb_failing_mid_run_still_leaves_the_local_results(tmp_path, monkeypatch):
    def lost(self, *args, **kwargs):
        raise ConnectionError("W&B connection lost")

    monkeypatch.setattr(WandbLogger, "log_metrics", lost)
    out = tmp_path / "run"
    with pytest.raises(ConnectionError):
        train(config(tmp_path, out, "logger=wandb", "trainer.max_steps=4"))
    record = results(out)
    assert record["status"] == "failed" and "W&B connection lost" in record["error"]
    assert record["versions"]["wandb"] and record["config"]["trainer"]["max_steps"] == 4
