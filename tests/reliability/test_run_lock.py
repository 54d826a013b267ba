"""One writer per run directory (issue 29, item 4): ``pelab.reliability.resume.lock.run_lock``
held by one process refuses (or makes wait) a second one, with a message naming the directory and
the holder; through the real command line, a second run into a running run's directory is refused
and leaves the first one's record alone."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from pelab.errors import ConfigError
from pelab.reliability.resume.lock import run_lock
from tests.reliability.runs import cli, fault, results

pytestmark = pytest.mark.integration  # real processes

HOLD = """
import sys, time
from pelab.reliability.resume.lock import run_lock
with run_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def holder(directory: Path, seconds: float) -> subprocess.Popen:
    """Another process holding ``directory``'s lock for ``seconds``, once it printed ``held``."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(directory), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline().strip() == "held"
    return process


@pytest.mark.processes
def test_a_second_writer_is_refused_naming_the_directory_and_the_holder(tmp_path):
    process = holder(tmp_path / "run", 30)
    try:
        with pytest.raises(ConfigError) as refused, run_lock(tmp_path / "run"):
            pass
        message = str(refused.value)
        assert str(tmp_path / "run") in message
        assert f"process {process.pid} on " in message
        assert "in use by another run" in message
    finally:
        process.kill()
        process.wait()
    with run_lock(tmp_path / "run"):  # the lock died with its holder: no stale lock
        pass


@pytest.mark.processes
def test_a_second_writer_waits_for_the_first_when_asked(tmp_path):
    process = holder(tmp_path / "run", 1.5)
    start = time.monotonic()
    with run_lock(tmp_path / "run", wait_s=60):
        waited = time.monotonic() - start
    process.wait()
    assert 0.5 < waited < 30


@pytest.mark.processes
def test_a_second_run_into_a_running_runs_directory_is_refused(repo_root, tmp_path):
    out = tmp_path / "run"
    marker = tmp_path / "paused"
    first = cli(repo_root, tmp_path, out, *fault("pause", 2, marker), wait=False)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        before = (out / "results.json").read_text()
        second = cli(repo_root, tmp_path, out)
        assert second.returncode == 1
        assert f"Error: {out} is in use by another run: process {first.pid}" in second.stderr
        assert (out / "results.json").read_text() == before  # untouched
        assert results(out)["status"] == "running"
    finally:
        first.kill()
        first.wait()
