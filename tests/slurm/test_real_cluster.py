"""The real-cluster campaign (issue 29, item 5): ``make test-slurm`` starts a single-node SLURM
from Debian's packages (``scripts/slurm_cluster.sh``) and runs these cases through the real
command line (``scripts/train.py -m hydra/launcher=slurm``). Skipped, saying why, unless
``PELAB_SLURM=1`` (set by ``make test-slurm`` once the cluster is up) and ``sinfo`` answers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.reliability.runs import RESUMABLE, assert_same_as_twin, fault

if os.environ.get("PELAB_SLURM") != "1":
    pytest.skip(
        "the real-SLURM campaign runs with `make test-slurm` (it starts a single-node cluster "
        "from Debian's packages, scripts/slurm_cluster.sh)",
        allow_module_level=True,
    )
if shutil.which("sinfo") is None or subprocess.run(["sinfo"], capture_output=True).returncode:
    pytest.skip(
        "no SLURM cluster answers here (sinfo missing or failing): scripts/slurm_cluster.sh start",
        allow_module_level=True,
    )

# every test submits jobs that start Python processes (tests/conftest.py holds the tiers)
pytestmark = [pytest.mark.integration, pytest.mark.processes]

QUIET = ["trainer.enable_progress_bar=false", "callbacks.progress_bar=null"]


HOOK = "+hydra.callbacks.sig._target_=tests.reliability.signal_hooks.SignalAtJob"


def sweep(repo_root: Path, tmp_path: Path, sweep_dir: Path, *overrides: str, wait=True):
    cmd = [
        sys.executable,
        "scripts/train.py",
        "-m",
        "hydra/launcher=slurm",
        *RESUMABLE,
        *overrides,
        f"hydra.sweep.dir={sweep_dir}",
        f"paths.cache_dir={tmp_path / 'cache'}",
    ]
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    # the jobs import the test hooks (tests.reliability), and pelab as this process does
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo_root), env.get("PYTHONPATH")) if p)
    kwargs = dict(cwd=repo_root, env=env, text=True, stdin=subprocess.DEVNULL)
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)
    return subprocess.run(cmd, capture_output=True, timeout=900, **kwargs)


def records(sweep_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/results.json"))]


@pytest.fixture(scope="module")
def twins(repo_root, tmp_path_factory) -> Path:
    """The uninterrupted sweep ``seed=0,1`` on the cluster: what every interrupted job must
    end as (issue 42: whole records, not only weights)."""
    tmp = tmp_path_factory.mktemp("twins")
    done = sweep(repo_root, tmp, tmp / "s", "seed=0,1")
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp / "s"


def assert_ends_as_twin(sweep_dir: Path, twins: Path, seed: int = 0) -> None:
    """The job of ``seed`` in ``sweep_dir`` ended with its uninterrupted twin's whole record
    (status, test and validation scores per length, learned, steps to learn, the tested
    checkpoint) and weights; no Lightning requeue checkpoint is left beside it."""
    [job] = sweep_dir.glob(f"*_s{seed}_*/")
    twin = twins / job.name
    assert twin.is_dir(), sorted(p.name for p in twins.iterdir())
    record = json.loads((job / "results.json").read_text())
    assert_same_as_twin(job, record, (twin, json.loads((twin / "results.json").read_text())))
    assert not list(job.glob("hpc_ckpt_*.ckpt"))


def requeues(sweep_dir: Path) -> list[str]:
    """The sweep's one job's SLURM states, every run of it (``sacct -D``), oldest first."""
    return subprocess.run(
        ["sacct", "-D", "-X", "-n", "-P", "-o", "State", "-j", record_job(sweep_dir)],
        capture_output=True,
        text=True,
    ).stdout.split()


def wait_for(path: Path, process: subprocess.Popen, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{path} did not appear in {seconds} s"
        time.sleep(0.5)


def test_a_cpu_sweep_with_the_launchers_defaults_runs_and_is_summarised(repo_root, tmp_path):
    """Item 1: no GPU, one CPU, the default memory asked; a re-run asks the measured peak."""
    done = sweep(repo_root, tmp_path, tmp_path / "s", "seed=0,1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 jobs: 2 completed" in done.stderr
    log = done.stdout + done.stderr  # Hydra logs to stdout
    assert "gpus=0: trainer.accelerator=cpu" in log and "cpus=1: 1 torch thread" in log, log
    assert "mem_gb=4: the default" in log
    assert all(
        r["status"] == "completed" and r["peak_rss_mb"] > 0 for r in records(tmp_path / "s")
    )
    again = sweep(repo_root, tmp_path, tmp_path / "s", "seed=0,1", "skip_completed=true")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "a previous run peaked at" in again.stdout + again.stderr


@pytest.mark.parametrize(
    "override, limit",
    [
        ("hydra.launcher.gpus_per_node=1", "nodes have no GPU"),
        ("hydra.launcher.cpus_per_task=64", "cpus_per_task=64 exceeds partition debug's"),
        ("hydra.launcher.mem_gb=4096", "mem_gb=4096 exceeds partition debug's"),
    ],
)
def test_a_job_the_partition_can_never_start_is_refused_naming_the_limit(
    repo_root, tmp_path, override, limit
):
    done = sweep(repo_root, tmp_path, tmp_path / "s", override)
    assert done.returncode == 1
    assert limit in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert not (tmp_path / "s" / ".submitit").exists()  # nothing submitted


def test_a_cancelled_job_is_recorded_interrupted_and_the_others_finish(repo_root, tmp_path, twins):
    """Item 2: scancel one job of the array: the driver waits for the other and prints the
    summary, the cancelled job's record says interrupted with its resume command; that command
    (the sweep again) resumes it, and it ends as its uninterrupted twin."""
    marker, sweep_dir = tmp_path / "paused", tmp_path / "s"
    driver = sweep(
        repo_root, tmp_path, sweep_dir, "seed=0,1", *fault("pause", 2, marker, seed=1), wait=False
    )
    wait_for(marker, driver)
    lock = next(sweep_dir.glob("*_s1_*/.pelab.lock"))
    job = json.loads(lock.read_text())["slurm_job"]
    subprocess.run(["scancel", job], check=True)
    _, stderr = driver.communicate(timeout=600)
    assert driver.returncode == 1
    assert "UncompletedJobError" not in stderr and "Traceback" not in stderr, stderr[-3000:]
    assert "2 jobs: 1 completed, 1 interrupted" in stderr
    cancelled = next(r for r in records(sweep_dir) if r["status"] == "interrupted")
    assert "skip_completed=true" in cancelled["resume_command"]
    again = sweep(repo_root, tmp_path, sweep_dir, "seed=0,1", "skip_completed=true")
    assert again.returncode == 0, again.stderr[-3000:]
    for seed in (0, 1):
        assert_ends_as_twin(sweep_dir, twins, seed)


def test_sigusr1_during_training_requeues_and_the_job_completes(repo_root, tmp_path, twins):
    """Item 3 on the real cluster: SIGUSR1 (what --signal=USR1@90 sends) at step 2: the job
    saves last.ckpt at the step's end, requeues itself, and its second run resumes and ends as
    its uninterrupted twin (issue 42: it tested the weights of the signal; SLURM holds a
    requeued job about 2 minutes first)."""
    sweep_dir = tmp_path / "s"
    marker = tmp_path / "signalled"
    done = sweep(repo_root, tmp_path, sweep_dir, "seed=0", *fault("sigusr1", 2, marker))
    assert marker.exists()
    assert done.returncode == 0, done.stderr[-3000:]
    [record] = records(sweep_dir)
    assert record["status"] == "completed"
    assert record["resumed_from"].endswith("checkpoints/last.ckpt")
    assert record["resumed_from_step"] == 3  # the end of the step of the signal
    assert requeues(sweep_dir) == ["REQUEUED", "COMPLETED"]
    assert_ends_as_twin(sweep_dir, twins)


def slurm_state(sweep_dir: Path) -> str:
    """The SLURM state (sacct) of the sweep's one job, found by the id its run lock names."""
    job = json.loads(next(sweep_dir.glob("*/.pelab.lock")).read_text())["slurm_job"]
    for _ in range(30):  # sacct learns the end from slurmdbd a moment later
        out = subprocess.run(
            ["sacct", "-X", "-n", "-P", "-o", "State", "-j", job], capture_output=True, text=True
        ).stdout.split()
        if out and out[-1] not in ("RUNNING", "PENDING", "COMPLETING"):
            return out[-1]
        time.sleep(1)
    return out[-1] if out else "unknown"


def test_sigusr1_after_the_record_is_written_leaves_the_job_completed(repo_root, tmp_path, twins):
    """Item 3: the signal once every record is written (the issue: a time-limit run signalled
    2 s after pelab finished was marked FAILED 10:0) is ignored: no requeue, COMPLETED."""
    sweep_dir, marker = tmp_path / "s", tmp_path / "signalled"
    hook = [HOOK, "+hydra.callbacks.sig.moment=end", f"+hydra.callbacks.sig.marker={marker}"]
    done = sweep(repo_root, tmp_path, sweep_dir, "seed=0", *hook)
    assert marker.exists()
    assert done.returncode == 0, done.stderr[-3000:]
    assert slurm_state(sweep_dir) == "COMPLETED"
    assert_ends_as_twin(sweep_dir, twins)


def test_sigusr1_before_the_run_requeues_and_the_job_completes(repo_root, tmp_path, twins):
    """Item 3: the signal at the job's start (before any training): requeued, not killed; the
    requeued job runs and completes (about 2 minutes of SLURM's requeue delay)."""
    sweep_dir, marker = tmp_path / "s", tmp_path / "signalled"
    hook = [HOOK, "+hydra.callbacks.sig.moment=start", f"+hydra.callbacks.sig.marker={marker}"]
    done = sweep(repo_root, tmp_path, sweep_dir, "seed=0", *hook)
    assert marker.exists()
    assert done.returncode == 0, done.stderr[-3000:]
    [record] = records(sweep_dir)
    assert record["status"] == "completed"
    assert slurm_state(sweep_dir) == "COMPLETED"
    requeued = requeues(sweep_dir)
    assert requeued[0] == "REQUEUED", requeued  # the first run was requeued, the second completed
    assert_ends_as_twin(sweep_dir, twins)


def test_sigusr1_between_fit_and_test_requeues_and_the_job_completes(repo_root, tmp_path, twins):
    """The signal after training, before the final test: requeued; the requeued job resumes at
    the last step, only tests, and ends as its twin."""
    sweep_dir, marker = tmp_path / "s", tmp_path / "signalled"
    hook = [
        "+callbacks.sig._target_=tests.reliability.signal_hooks.SignalOnFitEnd",
        f"+callbacks.sig.marker={marker}",
    ]
    done = sweep(repo_root, tmp_path, sweep_dir, "seed=0", *hook)
    assert marker.exists()
    assert done.returncode == 0, done.stderr[-3000:]
    assert requeues(sweep_dir) == ["REQUEUED", "COMPLETED"]
    [record] = records(sweep_dir)
    assert record["resumed_from_step"] == 8
    assert_ends_as_twin(sweep_dir, twins)


def test_scontrol_requeue_mid_training_ends_as_the_twin(repo_root, tmp_path, twins):
    """``scontrol requeue`` (what preemption with PreemptMode=REQUEUE and an operator do): SLURM
    ends the running job with SIGTERM, which pelab answers at the step's end (last.ckpt); the
    requeued job resumes and ends as its twin."""
    sweep_dir, marker = tmp_path / "s", tmp_path / "paused"
    driver = sweep(
        repo_root,
        tmp_path,
        sweep_dir,
        "seed=0",
        *fault("pause", 6, marker, seconds=15),
        wait=False,
    )
    wait_for(marker, driver)
    subprocess.run(["scontrol", "requeue", record_job(sweep_dir)], check=True)
    _, stderr = driver.communicate(timeout=900)
    assert driver.returncode == 0, stderr[-3000:]
    assert requeues(sweep_dir)[0] == "REQUEUED"
    assert_ends_as_twin(sweep_dir, twins)


def test_a_job_at_its_time_limit_requeues_and_ends_as_the_twin(repo_root, tmp_path, twins):
    """The time limit itself (``--time``): SLURM sends the requeue signal ``USR1@200`` before a
    5-minute limit, up to 60 s early (between 40 and 100 s in), while the job sleeps 120 s at
    step 6; it saves the step, requeues, and its requeued run (done before its own signal) ends
    as its twin."""
    sweep_dir, marker = tmp_path / "s", tmp_path / "paused"
    limit = [
        "hydra.launcher.timeout_min=5",
        "hydra.launcher.additional_parameters.signal=USR1@200",
    ]
    done = sweep(
        repo_root, tmp_path, sweep_dir, "seed=0", *limit, *fault("pause", 6, marker, seconds=120)
    )
    assert marker.exists()
    assert done.returncode == 0, done.stderr[-3000:]
    assert requeues(sweep_dir) == ["REQUEUED", "COMPLETED"]
    [record] = records(sweep_dir)
    assert record["resumed_from_step"] == 7
    assert_ends_as_twin(sweep_dir, twins)


def record_job(sweep_dir: Path) -> str:
    return json.loads(next(sweep_dir.glob("*/.pelab.lock")).read_text())["slurm_job"]


def test_a_sweep_rerun_while_its_jobs_run_does_not_write_into_them(repo_root, tmp_path):
    """Item 4: the same sweep launched again while its job still runs: the job is not
    submitted twice (the directory's lock names the first), and its record is untouched."""
    sweep_dir, marker = tmp_path / "s", tmp_path / "paused"
    first = sweep(repo_root, tmp_path, sweep_dir, "seed=0", *fault("pause", 2, marker), wait=False)
    try:
        wait_for(marker, first)
        [path] = sweep_dir.glob("*/results.json")
        before = path.read_text()
        holder = json.loads(next(sweep_dir.glob("*/.pelab.lock")).read_text())["slurm_job"]
        second = sweep(repo_root, tmp_path, sweep_dir, "seed=0", *fault("pause", 2, marker))
        assert second.returncode == 1  # the summary: its run has not completed
        said = second.stdout + second.stderr
        assert "not submitted" in said and "is in use by another run" in said, said[-3000:]
        assert f"SLURM job {holder}" in said
        assert path.read_text() == before
    finally:
        for lock in sweep_dir.glob("*/.pelab.lock"):  # the first job, by the id its lock names
            subprocess.run(["scancel", json.loads(lock.read_text())["slurm_job"]], check=False)
        first.communicate(timeout=300)
