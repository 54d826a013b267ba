"""The parallel launcher's own pieces: its settings, what it says of a dead job, and how it
records one (the sweeps themselves: ``reliability/test_sweeps.py``)."""

import json
import signal

import pytest

from hydra_plugins.pelab_launcher.pool_launcher import (
    PoolLauncher,
    _death,
    available_cores,
    mark_failed,
)
from hydra_plugins.pelab_launcher.worker import job_threads
from pelab.errors import ConfigError
from pelab.record import write_json_atomic


def test_one_job_per_core_by_default_and_jobs_times_threads_fill_the_cores():
    default = PoolLauncher()
    assert (default.n_jobs, default.threads) == (available_cores(), 1)
    one = PoolLauncher(n_jobs=1)
    assert (one.n_jobs, one.threads) == (1, available_cores())
    assert PoolLauncher(n_jobs=2, threads_per_job=3).threads == 3


def test_a_job_starts_with_its_configs_number_of_threads_else_its_share():
    assert job_threads("auto", 1) == 1  # its entry point's auto then chooses within the share
    assert job_threads(3, 1) == 3  # threads=3 in the job's config: honoured as given
    assert job_threads(None, 2) == 2  # a config without the key
    assert job_threads("all", 2) == 2  # refused by the job's entry point, in its record


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"n_jobs": 0}, r"hydra.launcher.n_jobs=0: give a number of jobs at once >= 1, or -1"),
        ({"n_jobs": -2}, r"hydra.launcher.n_jobs=-2"),
        ({"threads_per_job": 0}, r"hydra.launcher.threads_per_job=0: give >= 1, or null"),
    ],
)
def test_bad_settings_are_refused_by_name(options, message):
    with pytest.raises(ConfigError, match=message):
        PoolLauncher(**options)


def test_a_death_is_named_by_its_signal_or_exit_status():
    assert _death(-signal.SIGKILL) == "killed by SIGKILL (out of memory, or killed from outside)"
    assert _death(-signal.SIGSEGV) == "killed by SIGSEGV"
    assert _death(3) == "exited with status 3"
    assert _death(0) == "ended without returning its result"


def test_a_dead_stack_marks_its_running_members_failed_and_leaves_the_finished_ones(tmp_path):
    job = tmp_path / "rope_copy_s0-1_abc"
    write_json_atomic(
        job / "seed_0" / "results.json", {"status": "completed", "job_type": "train"}
    )
    write_json_atomic(job / "seed_1" / "results.json", {"status": "running", "job_type": "train"})
    finished = (job / "seed_0" / "results.json").read_bytes()
    log = tmp_path / ".launcher" / "0.log"
    assert mark_failed(job, "killed by SIGKILL", log, ["step 5", "injecting fault"])
    assert (job / "seed_0" / "results.json").read_bytes() == finished
    record = json.loads((job / "seed_1" / "results.json").read_text())
    assert record["status"] == "failed" and record["log_tail"] == ["step 5", "injecting fault"]
    assert record["error"].startswith("killed by SIGKILL; re-run the same command")
    assert record["error"].endswith(f"output: {log}")
    assert not mark_failed(tmp_path / "never_started", "killed by SIGKILL", log, [])
