"""A disk that fills up or refuses writes, for real: the run directory on a small or read-only
tmpfs, mounted in a private mount namespace (``unshare -rm``, no root needed where user
namespaces are enabled). The run ends with one clear line, records why, and leaves no
half-written file."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys

import pytest
import torch

from tests.conftest import TINY

MOUNT = "/tmp/pelab-fault-mount"


def _can_mount() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = f"mkdir -p {MOUNT} && mount -t tmpfs -o size=1m tmpfs {MOUNT}"
    probed = subprocess.run(["unshare", "-rm", "sh", "-c", probe], capture_output=True)
    return probed.returncode == 0


pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(
        not _can_mount(), reason="needs unshare -rm to mount a private tmpfs (user namespaces)"
    ),
]


def _train_on_tmpfs(repo_root, tmp_path, options: str, *overrides: str, then: str = ""):
    """``scripts/train.py`` with its run directory on a fresh tmpfs (``options``: its mount
    options); ``then``: a shell command run after it inside the namespace (the mount is gone
    once the namespace ends)."""
    train = [
        sys.executable,
        "scripts/train.py",
        *TINY,
        "logger=none",
        "trainer.max_steps=8",
        "trainer.val_check_interval=4",
        f"hydra.run.dir={MOUNT}/run",
        f"paths.cache_dir={tmp_path / 'cache'}",
        *overrides,
    ]
    script = (
        f"mkdir -p {MOUNT} && mount -t tmpfs -o {options} tmpfs {MOUNT} && "
        f"{shlex.join(train)}; echo rc=$?; {then}"
    )
    env_script = f"cd {shlex.quote(str(repo_root))} && {script}"
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", env_script],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        env={"PATH": "/usr/bin:/bin", "WANDB_MODE": "offline", "HOME": str(tmp_path)},
    )


@pytest.mark.processes
@pytest.mark.integration
def test_a_full_disk_during_a_checkpoint_is_one_clear_line_and_nothing_half_written(
    tmp_path, repo_root
):
    """The tmpfs holds the first checkpoints but not a later one: the run fails naming the file
    and the disk, results.json records it, and every checkpoint left is complete."""
    copy = f"cp -r {MOUNT}/run {tmp_path / 'left'}"
    proc = _train_on_tmpfs(repo_root, tmp_path, "size=150k", then=copy)
    assert "rc=1" in proc.stdout, proc.stderr[-3000:]
    assert "Error: cannot write " in proc.stderr and "no space left on device" in proc.stderr
    assert "Traceback" not in proc.stderr
    left = tmp_path / "left"
    record = json.loads((left / "results.json").read_text())
    assert record["status"] == "failed"
    assert record["error"].startswith(f"cannot write {MOUNT}/run/checkpoints/")
    assert "no space left on device (disk full)" in record["error"]
    checkpoints = sorted((left / "checkpoints").iterdir())
    assert checkpoints and all(p.suffix == ".ckpt" for p in checkpoints)  # no temporary file
    for path in checkpoints:
        assert torch.load(path, weights_only=True)["global_step"] > 0  # complete


@pytest.mark.processes
@pytest.mark.integration
def test_a_read_only_run_directory_is_one_clear_line(tmp_path, repo_root):
    proc = _train_on_tmpfs(repo_root, tmp_path, "size=1m,ro")
    assert "rc=1" in proc.stdout
    assert f"Error: cannot write {MOUNT}/run" in proc.stderr, proc.stderr[-3000:]
    assert "read-only file system. Choose another output directory" in proc.stderr
    assert "Traceback" not in proc.stderr
