"""The parallel launcher's own pieces: its settings, how many jobs share a GPU, what it says of
a dead job, and how it records one (``unrecorded``); the GPUs of a node are faked at one seam
(``gpu_placement.probe_gpu``) (the sweeps themselves: ``reliability/test_sweeps.py``)."""

import json
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from hydra_plugins.pelab_launcher import gpu_placement, pool_launcher
from hydra_plugins.pelab_launcher.gpu_placement import (
    CUDA_CONTEXT_BYTES,
    measure,
    place_jobs,
    take_gpu,
)
from hydra_plugins.pelab_launcher.pool_launcher import PoolLauncher, _death, available_cores
from hydra_plugins.pelab_launcher.unrecorded import mark_failed
from hydra_plugins.pelab_launcher.worker import job_threads
from pelab.errors import ConfigError
from pelab.record import write_json_atomic
from tests.conftest import CONFIG_DIR, TINY

GIB = 2**30


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


def test_each_gpu_runs_as_many_jobs_at_once_as_fit_its_free_memory_at_most_one_per_core():
    assert place_jobs([80 * GIB], 10 * GIB, 16, 66) == [8]
    assert place_jobs([80 * GIB], GIB, 16, 66) == [16]  # one per core at most
    assert place_jobs([80 * GIB], GIB, 16, 3) == [3]
    assert place_jobs([8 * GIB], 10 * GIB, 16, 66) == [1]  # none fits: its check refuses it
    assert place_jobs([80 * GIB] * 8, 10 * GIB, 16, 66) == [2] * 8  # 16 cores over 8 GPUs
    assert place_jobs([80 * GIB, 20 * GIB], 10 * GIB, 16, 66) == [8, 2]  # a busy second GPU
    assert place_jobs([80 * GIB, 20 * GIB], 10 * GIB, 16, 3) == [2, 1]  # spread, not packed
    assert place_jobs([80 * GIB, 80 * GIB, 20 * GIB, 80 * GIB], 8 * GIB, 16, 66) == [5, 5, 2, 4]
    assert place_jobs([4 * GIB, 8 * GIB], 10 * GIB, 16, 66) == [0, 1]  # the roomiest one
    with pytest.raises(ValueError, match=r"need=0: give >= 1"):
        place_jobs([80 * GIB], 0, 16, 66)
    with pytest.raises(ValueError, match=r"jobs=0: give >= 1"):
        place_jobs([80 * GIB], GIB, 16, 0)


def shares(launcher: PoolLauncher) -> list[tuple[str, int, float]]:
    """Each GPU's device, jobs at once and each job's fraction of its memory."""
    return [(g.device, g.jobs, g.fraction) for g in launcher.gpus]


def approx(fraction: float) -> float:
    return pytest.approx(fraction, rel=1e-9)


def jobs(n: int, accelerator: str = "gpu") -> list:
    config = OmegaConf.create({"trainer": {"accelerator": accelerator}})
    return [SimpleNamespace(config=config, output_dir=Path(f"sweep/{i}")) for i in range(n)]


@pytest.fixture
def gpu(monkeypatch):
    """A 16-core machine with CUDA, by default one GPU with 80 GiB free of 80 (the one seam:
    ``gpu_placement.probe_gpu``); ``gpu(needs, free=[...])``: what the probe measures each job
    to need, and each GPU's free memory (it records the jobs it was given)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(pool_launcher, "available_cores", lambda: 16)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    probed = []

    def probe(needs: list, free: tuple = (80 * GIB,)) -> list:
        def answer(measured):
            probed.append(measured)
            return [(f, 80 * GIB) for f in free], needs[: len(measured)]

        monkeypatch.setattr(gpu_placement, "probe_gpu", answer)
        return probed

    return probe


def test_a_gpu_sweep_runs_as_many_jobs_as_fit_and_holds_each_to_its_share(gpu, caplog):
    """``experiment=ablation_cpu trainer=gpu``: 66 jobs on a 16-core machine. The largest need
    of a job that fits alone (7 GiB, plus a CUDA context) fits 10 times in the free memory; each
    job's allocator may hold a tenth of it, less its context, which its own memory check reads."""
    probed = gpu([7 * GIB, 3 * GIB, None, 100 * GIB] + [3 * GIB] * 62)
    launcher = PoolLauncher()
    with caplog.at_level("INFO", logger=gpu_placement.__name__):
        launcher.share_gpu(jobs(66))
    assert len(probed[0]) == 66
    assert (launcher.n_jobs, launcher.threads) == (10, 1)
    assert shares(launcher) == [("0", 10, approx((8 * GIB - CUDA_CONTEXT_BYTES) / (80 * GIB)))]
    assert (
        "10 job(s) at once on 1 GPU(s) (10 on GPU 0 of 80.0 GiB free): each needs about 8.0 GiB "
        "(64 of 66 jobs measured to fit alone" in caplog.text
    )
    gpu([None] * 66)  # none fits alone, or evaluations (not measured): one at a time
    launcher.share_gpu(jobs(66))
    assert (launcher.n_jobs, launcher.threads) == (1, 16)
    assert shares(launcher) == [("0", 1, approx((80 * GIB - CUDA_CONTEXT_BYTES) / (80 * GIB)))]


def test_every_gpu_of_a_node_runs_jobs_each_its_own_device_and_none_over_its_share(
    gpu, monkeypatch
):
    """A node with 4 GPUs, one of them busy (20 GiB free), in a SLURM allocation that names them
    4-7: 66 jobs of 7 GiB run 16 at once (one per core), spread evenly within each GPU's room
    (the busy one fits 2); each started job takes the GPU with the most room, and no GPU runs
    more than its jobs."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    gpu([7 * GIB] * 66, free=(80 * GIB, 80 * GIB, 20 * GIB, 80 * GIB))
    launcher = PoolLauncher()
    launcher.share_gpu(jobs(66))
    assert launcher.n_jobs == 16
    assert [(g.device, g.jobs) for g in launcher.gpus] == [("4", 5), ("5", 5), ("6", 2), ("7", 4)]
    assert launcher.gpus[2].fraction == pytest.approx((10 * GIB - CUDA_CONTEXT_BYTES) / (80 * GIB))
    taken = [take_gpu(launcher.gpus).device for _ in range(16)]
    assert taken[:4] == ["4", "5", "7", "6"]  # the roomiest first: every GPU is busy at once
    assert {d: taken.count(d) for d in "4567"} == {"4": 5, "5": 5, "6": 2, "7": 4}
    with pytest.raises(RuntimeError, match="no GPU has room"):
        take_gpu(launcher.gpus)
    launcher.gpus[1].running -= 1  # a job on GPU 5 ended: the next one goes there
    assert take_gpu(launcher.gpus).device == "5"


def test_a_started_gpu_job_is_given_its_device_and_share(gpu, tmp_path, monkeypatch):
    """What the job's process receives (``worker.main`` sets ``CUDA_VISIBLE_DEVICES`` from it
    before CUDA starts); a CPU job of the same sweep gets no device."""
    gpu([7 * GIB] * 2, free=(80 * GIB, 80 * GIB))
    launcher = PoolLauncher()
    launcher.share_gpu(jobs(2))
    started = []

    class Process(SimpleNamespace):
        pid = 1

        def start(self):
            started.append(self.args[-1])

    context = SimpleNamespace(Process=lambda target, args: Process(args=args))
    paths = dict(log_path=tmp_path / "l", call_path=tmp_path / "c", result_path=tmp_path / "r")
    for config in (jobs(1)[0].config, jobs(1)[0].config, jobs(1, "cpu")[0].config):
        job = pool_launcher._Job(0, [], config, tmp_path, **paths)
        launcher._start(job, context)
    share = pytest.approx((80 * GIB - CUDA_CONTEXT_BYTES) / (80 * GIB))  # one job on each
    assert started == [("0", share), ("1", share), None]


def test_a_gpu_sweeps_given_jobs_at_once_share_its_memory_unmeasured(gpu):
    probed = gpu([])
    launcher = PoolLauncher(n_jobs=4)
    launcher.share_gpu(jobs(66))
    assert probed == [[]] and (launcher.n_jobs, launcher.threads) == (4, 4)
    assert shares(launcher) == [("0", 4, approx((20 * GIB - CUDA_CONTEXT_BYTES) / (80 * GIB)))]
    gpu([], free=(80 * GIB, 80 * GIB))  # two GPUs: two each
    launcher.share_gpu(jobs(66))
    assert [(g.device, g.jobs) for g in launcher.gpus] == [("0", 2), ("1", 2)]
    with pytest.raises(ConfigError, match=r"hydra.launcher.n_jobs=100: .* leave each 0.80 GiB"):
        gpu([])
        PoolLauncher(n_jobs=100).share_gpu(jobs(66))


@pytest.mark.parametrize("accelerator", ["cpu", "auto"])
def test_jobs_without_a_gpu_run_one_per_core_unmeasured(accelerator, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(gpu_placement, "probe_gpu", lambda measured: pytest.fail("probed"))
    launcher = PoolLauncher()
    launcher.share_gpu(jobs(66, accelerator))
    assert (launcher.n_jobs, launcher.gpus) == (available_cores(), [])


def test_a_probe_that_fails_says_why_in_one_line(monkeypatch, tmp_path):
    """A CUDA-only failure of one job's measurement is named (the job counts as not fitting
    alone); a probe that cannot run at all refuses the sweep naming its cause, never a silent
    one-at-a-time sweep."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: ((10, 30)[i] * GIB, 80 * GIB))
    chosen = []
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)

    def measure(config, output_dir, device):
        if output_dir.name == "bad":
            raise RuntimeError("CUDA error: no kernel image is available\nmore lines")
        return GIB

    monkeypatch.setattr(gpu_placement, "measure", measure)
    devices, needs, failures = gpu_placement._probe_gpu(
        [(None, tmp_path / "ok"), (None, tmp_path / "bad")]
    )
    assert chosen == [1]  # measured on the GPU with the most free memory
    assert devices == [(10 * GIB, 80 * GIB), (30 * GIB, 80 * GIB)] and needs == [GIB, None]
    assert failures == [("bad", "RuntimeError: CUDA error: no kernel image is available")]

    class Broken:
        def __init__(self, *args, **kwargs):
            raise OSError("forkserver could not start")

    monkeypatch.setattr(gpu_placement, "ProcessPoolExecutor", Broken)
    with pytest.raises(
        ConfigError,
        match=r"^the GPU probe failed before any job started: OSError: forkserver could not start",
    ):
        gpu_placement.probe_gpu([])


def test_the_probe_measures_a_training_job_as_composed_for_it_and_leaves_evaluations(tmp_path):
    """What the probe runs on the GPU, here on the CPU: the job's config with Hydra's node
    (``${hydra:...}`` resolved as in the job, its directory not made yet)."""

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        config = compose("train", TINY, return_hydra_config=True)
    assert measure(config, tmp_path / "0", "cpu") > 0
    assert not (tmp_path / "0").exists()
    evaluation = OmegaConf.create({"ckpt_path": "x", "trainer": {"accelerator": "gpu"}})
    assert measure(evaluation, tmp_path / "1", "cpu") is None  # its model is its checkpoint's
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        bad = compose("train", [*TINY, "model.optimizer.lr=-1"], return_hydra_config=True)
    with pytest.raises(ValueError, match="Invalid learning rate"):  # the probe names it
        measure(bad, tmp_path / "2", "cpu")


def test_a_gpu_sweep_on_a_machine_without_a_gpu_is_refused_before_any_job(monkeypatch):
    """``trainer=gpu`` on a CPU machine: the probe finds no GPU and the sweep stops in one line,
    instead of every job running into Lightning's error (issue 45)."""

    class InProcess:  # the probe's child process, here
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *args):
            return False

        def submit(self, function, *args):
            return SimpleNamespace(result=lambda: function(*args))

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(gpu_placement, "ProcessPoolExecutor", InProcess)
    monkeypatch.setattr(pool_launcher, "available_cores", lambda: 2)
    with pytest.raises(ConfigError, match=r"train on a GPU .* but none is visible here"):
        PoolLauncher().share_gpu(jobs(4))
