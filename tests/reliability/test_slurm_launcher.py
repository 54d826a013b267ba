"""pelab's submitit launchers (issue 29, items 1-2): the resources of a SLURM job follow the run
and a job its partition can never start is refused naming the limit (decisions tested on
captured ``scontrol``/``sinfo`` outputs, and through the CLI with fake SLURM commands); the
launching process waits for every job and records one that ended without a result as
``interrupted`` with the command that resumes it, then prints the sweep summary."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from hydra_plugins.pelab_launcher.submitit_launcher import wait_all
from hydra_plugins.pelab_launcher.unrecorded import mark_interrupted
from pelab.reliability.cluster.slurm import (
    DEFAULT_MEM_GB,
    job_resources,
    parse_partition,
    parse_time_min,
    unfit,
)
from tests import zygote
from tests.conftest import compose_config
from tests.reliability.runs import (
    RESUMABLE,
    SWEEP_ENV,
    fault,
    sweep_cli,
    sweep_command,
    sweep_job,
)

# `scontrol show partition debug --oneliner` and `sinfo -p debug -h -N -o '%N %c %m %G'` of the
# single-node Debian SLURM 22.05 of the issue (2 CPUs, no GPU) and of a GPU cluster
CPU_SCONTROL = (
    "PartitionName=debug AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL "
    "Default=YES QoS=N/A DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 "
    "Hidden=NO MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO "
    "MaxCPUsPerNode=UNLIMITED Nodes=localhost PriorityJobFactor=1 PriorityTier=1 RootOnly=NO "
    "ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=2 "
    "TotalNodes=1 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED "
    "MaxMemPerNode=UNLIMITED TRES=cpu=2,mem=7000M,node=1,billing=2\n"
)
CPU_SINFO = "localhost 2 7000 (null)\n"
GPU_SCONTROL = (
    "PartitionName=gpu AllowGroups=ALL Default=NO MaxTime=1-00:00:00 MaxCPUsPerNode=16 "
    "Nodes=gpu[01-02] State=UP TotalCPUs=64 MaxMemPerNode=128000\n"
)
GPU_SINFO = "gpu01 32 256000 gpu:a100:4(S:0-1)\ngpu02 32 256000 gpu:a100:4(S:0-1)\n"


def test_the_readme_defaults_on_a_two_cpu_node_name_every_limit():
    """The issue's case: 1 GPU, 8 CPUs, 32 GB asked of a 2-CPU node with 7000 MB and no GPU."""
    limits = parse_partition("debug", CPU_SCONTROL, CPU_SINFO)
    assert [(n.cpus, n.mem_mb, n.gpus) for n in limits.nodes] == [(2, 7000, 0)]
    problems = unfit(limits, gpus=1, cpus=8, mem_gb=32, timeout_min=240)
    assert len(problems) == 3, problems
    assert "gpus_per_node=1: partition debug's nodes have no GPU" in problems[0]
    assert "trainer=default" in problems[0]
    assert "cpus_per_task=8 exceeds partition debug's largest node (2 CPUs)" in problems[1]
    assert "mem_gb=32 exceeds partition debug's largest node (7000 MB of memory)" in problems[2]


def test_a_cpu_run_fits_the_two_cpu_node():
    limits = parse_partition("debug", CPU_SCONTROL, CPU_SINFO)
    assert unfit(limits, gpus=0, cpus=1, mem_gb=4, timeout_min=240) == []
    assert unfit(limits, gpus=0, cpus=2, mem_gb=6, timeout_min=10**6) == []


def test_partition_limits_time_cpus_memory_and_gpus():
    limits = parse_partition("gpu", GPU_SCONTROL, GPU_SINFO)
    assert [n.gpus for n in limits.nodes] == [4, 4]
    assert limits.max_time_min == 1440 and limits.max_cpus_per_node == 16
    assert unfit(limits, gpus=1, cpus=8, mem_gb=32, timeout_min=240) == []
    problems = unfit(limits, gpus=8, cpus=20, mem_gb=200, timeout_min=2000)
    assert any(
        "timeout_min=2000 exceeds partition gpu's MaxTime (1440 min)" in p for p in problems
    )
    assert any("cpus_per_task=20 exceeds partition gpu's MaxCPUsPerNode=16" in p for p in problems)
    assert any("mem_gb=200 exceeds partition gpu's MaxMemPerNode=128000 MB" in p for p in problems)
    assert any(
        "gpus_per_node=8: partition gpu's nodes have at most 4 GPU(s)" in p for p in problems
    )


@pytest.mark.parametrize(
    "text, minutes",
    [
        ("UNLIMITED", None),
        ("30", 30),
        ("1:30", 1.5),
        ("2:00:00", 120),
        ("1-00:00:00", 1440),
        ("2-12", 3600),
        ("1-01:30", 1530),
    ],
)
def test_slurm_time_formats(text, minutes):
    assert parse_time_min(text) == minutes


def test_resources_follow_the_run(tmp_path):
    cpu = compose_config(list(RESUMABLE), tmp_path)
    asked = job_resources(cpu, n_params=100_000, measured_mb=None)
    assert (asked.gpus, asked.cpus, asked.mem_gb) == (0, 1, DEFAULT_MEM_GB)
    gpu = compose_config([*RESUMABLE, "trainer=gpu"], tmp_path)
    on_gpu = job_resources(gpu, n_params=100_000, measured_mb=None)
    assert (on_gpu.gpus, on_gpu.cpus) == (1, 2)  # a torch thread and the host side (issue 43)
    assert "+ 1 for the GPU job's host side" in on_gpu.why[1]
    big = job_resources(cpu, n_params=50_000_000, measured_mb=2000, max_cpus=2)
    assert (big.cpus, big.mem_gb) == (2, 3)  # threads=auto within the node; 1.5 x 2000 MiB
    three = compose_config([*RESUMABLE, "threads=3"], tmp_path)
    assert job_resources(three, n_params=100_000, measured_mb=None).cpus == 3


def fake_slurm_bin(tmp_path: Path) -> tuple[Path, Path]:
    """``sinfo``/``scontrol`` answering as the 2-CPU node; ``sbatch`` keeps its script, fails."""
    bin_dir, kept = tmp_path / "bin", tmp_path / "sbatch_script"
    bin_dir.mkdir()
    (tmp_path / "scontrol.out").write_text(CPU_SCONTROL)
    (tmp_path / "sinfo.out").write_text(CPU_SINFO)
    scripts = {
        "sinfo": f'case "$*" in *%P*) echo "debug*";; *) cat {tmp_path / "sinfo.out"};; esac',
        "scontrol": f"cat {tmp_path / 'scontrol.out'}",
        "sbatch": f'cp "$1" {kept}; echo "sbatch: error: fake" >&2; exit 1',
        "srun": "exit 1",
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir, kept


def slurm_sweep(repo_root, tmp_path, *overrides: str) -> tuple[subprocess.CompletedProcess, Path]:
    bin_dir, kept = fake_slurm_bin(tmp_path)
    path = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    sweep = tmp_path / "sweep"
    return sweep_cli(
        repo_root, tmp_path, sweep, "hydra/launcher=slurm", *overrides, env=path
    ), kept


@pytest.mark.processes
@pytest.mark.integration
def test_a_job_the_partition_can_never_start_is_refused_before_submission(repo_root, tmp_path):
    done, kept = slurm_sweep(repo_root, tmp_path, "hydra.launcher.cpus_per_task=8")
    assert done.returncode == 1
    assert "Error: partition debug can never start these jobs" in done.stderr
    assert "cpus_per_task=8 exceeds partition debug's largest node (2 CPUs)" in done.stderr
    assert "Traceback" not in done.stderr
    assert not kept.exists()  # nothing submitted


@pytest.mark.processes
@pytest.mark.integration
def test_a_cpu_run_asks_no_gpu_one_cpu_and_the_default_memory(repo_root, tmp_path):
    done, kept = slurm_sweep(repo_root, tmp_path)
    script = kept.read_text()  # submitted (the fake sbatch then fails)
    assert "--cpus-per-task=1" in script, script
    assert f"--mem={DEFAULT_MEM_GB}GB" in script
    options = [line.split("=")[0] for line in script.splitlines() if line.startswith("#SBATCH")]
    assert not [o for o in options if "gpu" in o or "gres" in o], options
    assert "Error: sbatch refused the jobs of this sweep: sbatch: error: fake" in done.stderr
    assert "Traceback" not in done.stderr


class FakeJob:
    """A submitit job in ``state``: done after ``polls`` looks at it; ``results()`` returns or
    raises like submitit's."""

    def __init__(
        self,
        job_id: str,
        result=None,
        error: Exception | None = None,
        polls: int = 1,
        state: str = "CANCELLED",
    ) -> None:
        self.job_id, self.result, self.error, self.state = job_id, result, error, state
        self.waited, self.polls = False, polls

    def done(self) -> bool:
        self.polls -= 1
        return self.polls <= 0

    def results(self):
        self.waited = True
        if self.error is not None:
            raise self.error
        return [self.result]


def test_the_driver_waits_for_every_job_and_records_the_interrupted_one(tmp_path):
    from submitit.core.utils import UncompletedJobError

    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    for d in dirs:
        d.mkdir()
        record = {"job_type": "train", "status": "running", "config": {}}
        (d / "results.json").write_text(json.dumps(record))
    jobs = [
        FakeJob("1_0", error=UncompletedJobError("Job 1_0 has state CANCELLED")),
        FakeJob("1_1", result="done"),
        FakeJob("1_2", error=UncompletedJobError("Job 1_2 has state TIMEOUT")),
    ]
    returns = wait_all(jobs, [["seed=0"], ["seed=1"], ["seed=2"]], dirs, "python resume me")
    assert all(job.waited for job in jobs)  # the first failure stopped nothing
    assert len(returns) == 3 and returns[1] == "done"
    for d in (dirs[0], dirs[2]):
        record = json.loads((d / "results.json").read_text())
        assert record["status"] == "interrupted"
        assert record["resume_command"] == "python resume me"
        assert "ended without a result (state CANCELLED)" in record["error"]
    assert returns[0].return_value is None  # accounted for: Hydra goes on to the summary
    assert json.loads((dirs[1] / "results.json").read_text())["status"] == "running"


def test_each_job_gets_a_line_as_it_starts_and_as_it_ends_in_the_order_they_do(tmp_path, caplog):
    """A job seen running gets its start line then; one that ends between two looks gets both
    at once; the end lines say how each ended and the sweep's progress."""
    dirs = [tmp_path / "rope_copy_s0_aa", tmp_path / "alibi_copy_s0_bb"]
    for d, learned in zip(dirs, (True, False), strict=True):
        d.mkdir()
        record = {
            "status": "completed",
            "learned": learned,
            "steps_to_learn": 40 if learned else None,
        }
        (d / "results.json").write_text(json.dumps({"job_type": "train", **record}))
    jobs = [
        FakeJob("2_0", result="a", polls=3, state="RUNNING"),
        FakeJob("2_1", result="b", polls=2, state="PENDING"),
    ]
    with caplog.at_level("INFO", logger="hydra_plugins.pelab_launcher.submitit_launcher"):
        returns = wait_all(jobs, [["pe=rope"], ["pe=alibi"]], dirs, "python resume me")
    assert returns == ["a", "b"]  # in the jobs' order, whatever the order they ended in
    lines = [r.getMessage() for r in caplog.records]
    assert lines[:3] == [
        "rope_copy_s0_aa started (job 2_0)",
        "alibi_copy_s0_bb started (job 2_1)",
        "alibi_copy_s0_bb completed, not learned after 0 s; 1/2 jobs done (0 failed), ETA 0 s",
    ]
    assert (
        lines[3]
        == "rope_copy_s0_aa completed, learned at step 40 after 0 s; 2/2 jobs done (0 failed)"
    )


def test_a_finished_record_is_never_marked(tmp_path):
    (tmp_path / "results.json").write_text(
        json.dumps({"job_type": "train", "status": "completed"})
    )
    assert mark_interrupted(tmp_path, "gone", "resume") == []


@pytest.mark.processes
@pytest.mark.integration
def test_a_killed_job_of_a_local_submitit_sweep_is_summarised_not_a_traceback(repo_root, tmp_path):
    """submitit's local executor, from a fresh directory into the default sweep directory
    (``./logs/train/multiruns/<date>_<time>``), a job SIGKILLed mid-training: the driver waits
    for the other, which completes, records the killed one as interrupted with its resume
    command, and prints the summary; submitit keeps its job files beside the jobs."""
    cmd = sweep_command(repo_root, tmp_path, tmp_path, "hydra/launcher=local", "seed=0,1")
    cmd = [a for a in cmd if not a.startswith("hydra.sweep.dir=")]  # the default one
    cmd[0] = str(repo_root / cmd[0])
    env = {**os.environ, **SWEEP_ENV}
    done = zygote.run([*cmd, *fault("sigkill", 2, seed=1)], cwd=tmp_path, env=env, timeout=600)
    assert done.returncode == 1
    assert "UncompletedJobError" not in done.stderr
    assert "2 jobs: 1 completed, 1 interrupted" in done.stderr, done.stderr[-3000:]
    [sweep] = (tmp_path / "logs" / "train" / "multiruns").iterdir()
    records = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/results.json"))]
    assert sorted(r["status"] for r in records) == ["completed", "interrupted"]
    interrupted = next(r for r in records if r["status"] == "interrupted")
    resumed_in = interrupted["resume_command"].split("hydra.sweep.dir=")[1].split()[0]
    assert (tmp_path / resumed_in).resolve() == sweep.resolve()
    assert "skip_completed=true" in interrupted["resume_command"]
    assert list((sweep / ".submitit").iterdir())  # submitit's job files and logs


@pytest.mark.processes
@pytest.mark.integration
def test_a_sweep_rerun_does_not_submit_a_job_whose_run_still_runs(repo_root, tmp_path):
    """Item 4 at the launcher: a job whose directory another run holds is not submitted again
    (logged with the holder); the other jobs run."""
    from tests.reliability.test_run_lock import holder

    sweep = tmp_path / "sweep"
    held = sweep_job(sweep, "rope", "copy", 1, "seed=1")
    process = holder(held, 300)
    try:
        done = sweep_cli(repo_root, tmp_path, sweep, "hydra/launcher=local", "seed=0,1")
    finally:
        process.kill()
        process.wait()
    log = done.stdout + done.stderr
    assert f"not submitted: {held} is in use by another run: process {process.pid}" in log, log
    assert not (held / "results.json").exists()  # nothing written into the held directory
    assert [p.parent.name for p in sweep.glob("*/results.json")] == [
        sweep_job(sweep, "rope", "copy", 0, "seed=0").name
    ]


def test_a_local_sweep_spreads_its_gpu_jobs_over_the_machines_gpus(monkeypatch):
    """``hydra/launcher=local`` with ``trainer=gpu`` (issue 43): submitit alone hid every GPU
    (no ``gpus_per_node``) or showed all jobs GPU 0. Each GPU job sees one GPU, in turn from the
    one with the most free memory, as this process's ``CUDA_VISIBLE_DEVICES`` names them; a CPU
    job of the same sweep sees none; the job sets it before CUDA starts."""
    from types import SimpleNamespace

    from hydra_plugins.pelab_launcher import gpu_placement, job_config, submitit_launcher
    from hydra_plugins.pelab_launcher.gpu_placement import local_gpus
    from hydra_plugins.pelab_launcher.submitit_launcher import LocalLauncher
    from pelab.reliability.cluster import requeue

    free = [(20 * 2**30, 80 * 2**30), (70 * 2**30, 80 * 2**30), (50 * 2**30, 80 * 2**30)]
    monkeypatch.setattr(gpu_placement, "probe_gpu", lambda measured: (free, []))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")
    assert local_gpus([True, True, False, True, True]) == ["5", "6", None, "4", "5"]
    assert local_gpus([False, False]) == [None, None]  # a CPU sweep probes nothing

    launcher = LocalLauncher.__new__(LocalLauncher)
    launcher.config, launcher.hydra_context = object(), object()
    accelerators = {0: "gpu", 1: "cpu", 2: "gpu"}
    monkeypatch.setattr(
        job_config,
        "job_config",
        lambda context, config, overrides, num: {"trainer": {"accelerator": accelerators[num]}},
    )
    monkeypatch.setattr(gpu_placement, "wants_gpu", lambda c: c["trainer"]["accelerator"] == "gpu")
    asked = {}
    executor = SimpleNamespace(
        update_parameters=lambda **kw: asked.update(kw),
        map_array=lambda fn, *columns: list(zip(*columns, strict=True)),
    )
    calls = [([f"seed={n}"], "hydra.sweep.dir", n, f"job_id_for_{n}", {}) for n in range(3)]
    submitted = launcher.submit(executor, calls)
    assert len(submitted) == 3 and asked == {"gpus_per_node": 1}
    assert launcher.devices == {0: "5", 1: "", 2: "6"}

    seen = []
    monkeypatch.setattr(
        submitit_launcher.BaseSubmititLauncher,
        "__call__",
        lambda self, *args: seen.append(os.environ["CUDA_VISIBLE_DEVICES"]),
    )
    monkeypatch.setattr(requeue, "install", lambda: False)
    for call in calls:
        launcher(*call)
    assert seen == ["5", "", "6"]
