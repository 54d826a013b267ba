"""Evaluation memory, measured before training by running the run's own model once at the
longest length: the counted peak is what the tensors hold in the process's resident memory, the
extrapolation
from 1 and 2 sequences (used when the full batch might not fit) bounds the peak at the full
batch, and every shipped preset's longest evaluation fits in 24 GiB (a length that cannot fit
is refused before training: ``test_bad_input.py``)."""

from __future__ import annotations

import ctypes
import multiprocessing
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from pelab.assembly import build_model, build_task
from pelab.errors import ConfigError
from pelab.evaluate import evaluate
from pelab.record import write_json_atomic
from pelab.reliability.checks import memory, peak_memory
from pelab.sizing import job_need
from tests.conftest import CONFIG_DIR, TINY, compose_config
from tests.test_configs import options

CLEAR_REFS = Path("/proc/self/clear_refs")
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)


def tiny_eval(pe: str, batch: int = 8, length: int = 128):
    cfg = compose_config([f"pe={pe}", "model=encoder", "model.net.n_heads=8"])
    cfg.task.eval_lengths, cfg.data.eval_batch_size = [8, length], batch
    task = build_task(cfg)
    return cfg, task, build_model(cfg, task)


def _resident_peak(pe: str, queue) -> None:
    """In a fresh child process: the peak resident memory one forward pass adds (Linux), every
    block of 128 KiB or more mapped for itself and unmapped when freed."""
    libc = ctypes.CDLL("libc.so.6")
    assert libc.mallopt(M_MMAP_THRESHOLD, 128 * 1024) == 1  # glibc's default, made fixed
    cfg, task, model = tiny_eval(pe, batch=16, length=256)
    counted = peak_memory.forward_peak(model, task, 16, "cpu")  # also warms caches up

    def resident(field: str) -> int:
        line = next(x for x in Path("/proc/self/status").read_text().splitlines() if field in x)
        return int(line.split()[1]) * 1024

    libc.malloc_trim(0)
    CLEAR_REFS.write_text("5")  # restart the peak (VmHWM) from the current size
    before = resident("VmRSS:")
    peak_memory.forward_peak(model, task, 16, "cpu")
    queue.put((counted, resident("VmHWM:") - before))


@pytest.mark.processes
@pytest.mark.skipif(not (sys.platform == "linux" and CLEAR_REFS.exists()), reason="Linux /proc")
@pytest.mark.parametrize("pe", ["rope", "shaw"])  # fused and eager attention
@pytest.mark.integration
def test_the_counted_peak_agrees_with_resident_memory(pe):
    """16 sequences of 514 tokens (RoPE about 22 MiB, Shaw 407 MiB). glibc's mmap threshold is
    fixed in the child: by default it rises to the largest block freed (up to 32 MiB) and serves
    smaller blocks from its heap, whose holes stay resident, so that the same pass read 1.4x-2.3x
    RoPE's count, a different amount from run to run (``pelab.reliability.checks.memory``: the
    allocator's slack). Fixed, resident memory is what the tensors hold: within 1% of the count
    at every size measured."""
    context = multiprocessing.get_context("spawn")  # fork can deadlock a threaded torch
    queue = context.Queue()
    child = context.Process(target=_resident_peak, args=(pe, queue))
    child.start()
    counted, resident = queue.get(timeout=300)
    child.join(timeout=60)
    assert abs(resident - counted) <= 0.02 * counted, (counted, resident)


@pytest.mark.parametrize("pe", ["alibi", "shaw"])  # a fused bias, the eager path
def test_the_extrapolation_from_one_and_two_sequences_bounds_the_full_batch(pe, monkeypatch):
    cfg, task, model = tiny_eval(pe, batch=8)
    measured = peak_memory.forward_peak(model, task, 8, "cpu")
    monkeypatch.setattr(memory, "bound_bytes", lambda *args: float("inf"))  # force extrapolation
    extrapolated = memory.eval_need(cfg, task, model, "cpu")
    assert memory.MARGIN * measured <= extrapolated * 1.12  # ALiBi's extrapolation: 12% short
    assert extrapolated <= 2 * measured, (measured, extrapolated)


@pytest.mark.parametrize("pe", ["rope", "shaw"])  # the fused kernel (linear), eager (quadratic)
def test_a_length_too_long_to_measure_is_extrapolated_from_shorter_ones(pe):
    """Measured at 16, 32 and 64 (the bound at 128 does not fit in the free memory given), the
    quadratic through them bounds the peak at length 256, which is not measured; a free memory
    below that refuses the run before training."""
    cfg, task, model = tiny_eval(pe, batch=4, length=256)
    free = 4 * memory.bound_bytes(cfg, memory.tokens(task, 64), 2)
    extrapolated = memory.longer_need(cfg, task, model, free)
    measured = peak_memory.forward_peak(model, task, 4, "cpu")
    assert measured <= extrapolated <= 2 * memory.MARGIN * measured, (measured, extrapolated)


def test_a_task_without_shorter_lengths_to_extrapolate_from_is_not_checked_and_says_so(
    monkeypatch, caplog
):
    """A user dataset has examples at its own lengths only: sampling a shorter one fails, so
    the need cannot be extrapolated; the run goes on with a warning, never a traceback."""
    cfg, task, model = tiny_eval("rope", batch=4, length=256)
    monkeypatch.setattr(memory, "bound_bytes", lambda *args: float("inf"))  # too long to measure

    def no_such_length(*args):
        raise KeyError(16)

    monkeypatch.setattr(task, "sample", no_such_length)
    with caplog.at_level("WARNING", logger="pelab.reliability.checks.memory"):
        assert memory.check_eval_memory(cfg, task, model) is None
    assert "no shorter lengths to extrapolate from (16); not checked" in caplog.text


def preset_overrides():
    """Each experiment with each task its sweep runs (a grid over ``task`` or ``study_task``),
    then each task config as shipped."""
    for experiment in options("experiment"):
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
            full = compose("train", [f"experiment={experiment}"], return_hydra_config=True)
        params = full.hydra.sweeper.get("params") or {}
        grid = [
            f"{group}={value}"
            for group in ("task", "study_task")
            for value in str(params.get(group, "")).split(",")
            if value
        ]
        for choice in grid or [None]:
            yield [f"experiment={experiment}", *([choice] if choice else [])]
    for task in options("task"):
        if task != "from_dataset":  # a user's own dataset: its lengths are the user's
            yield [f"task={task}"]


@pytest.mark.slow  # measures the chomsky_gpu preset's 1500-token encoder passes on the CPU
def test_every_shipped_preset_evaluates_its_longest_length_in_24_gib(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda device: 24 * memory.GIB)
    for overrides in preset_overrides():
        cfg = compose_config(overrides)
        task = build_task(cfg)
        if memory.bound_bytes(cfg, task.max_sequence_length(), cfg.data.eval_batch_size) < (
            24 * memory.GIB
        ):
            continue  # fits even by the generous bound
        need = memory.check_eval_memory(cfg, task, build_model(cfg, task))  # raises if not
        assert need is not None and need < 24 * memory.GIB, overrides


def test_free_gpu_memory_counts_the_allocators_cache_and_ends_at_the_processs_share(monkeypatch):
    """What this process can still allocate: the device's free memory and the blocks its caching
    allocator reserved but does not use, within its per-process fraction (a parallel sweep's
    job: its share)."""
    gib = memory.GIB
    monkeypatch.setattr(memory.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(memory.torch.cuda, "mem_get_info", lambda: (10 * gib, 80 * gib))
    monkeypatch.setattr(memory.torch.cuda, "memory_reserved", lambda: 6 * gib)
    monkeypatch.setattr(memory.torch.cuda, "memory_allocated", lambda: 2 * gib)
    monkeypatch.setattr(memory, "gpu_fraction", lambda: 1.0)
    assert memory.available_bytes("cuda") == 14 * gib  # 10 free + 4 cached
    monkeypatch.setattr(memory, "gpu_fraction", lambda: 0.1)  # a share of 8 GiB, 2 allocated
    assert memory.available_bytes("cuda") == 6 * gib


def test_the_pass_is_measured_at_the_trainers_precision():
    """bf16-mixed (``trainer=gpu``) runs under autocast, as Lightning's steps do; 64-true holds
    float64 tensors."""
    cfg, task, model = tiny_eval("rope", length=32)
    fp32 = peak_memory.forward_peak(model, task, 8, "cpu")
    assert peak_memory.forward_peak(model, task, 8, "cpu", precision="bf16-mixed") < 0.7 * fp32
    assert peak_memory.forward_peak(model, task, 8, "cpu", precision="64-true") == 2 * fp32


def test_a_jobs_need_grows_with_its_training_batch_and_its_evaluation_batch():
    """``job_need`` (what a parallel sweep divides a GPU by) holds the training step, not only
    evaluation: each batch alone raises it."""

    cfg = compose_config([*TINY, "paths.output_dir=."])

    def need(batch: int, eval_batch: int) -> int:
        cfg.data.batch_size, cfg.data.eval_batch_size = batch, eval_batch
        return job_need(cfg, "cpu")

    base = need(16, 1)
    assert need(32, 1) > 1.5 * base
    assert need(16, 64) > 5 * base


def test_a_re_evaluation_that_cannot_fit_is_refused_before_it_runs(tmp_path, monkeypatch):
    """``scripts/eval.py`` checks its longest length as training does."""
    cfg = compose_config([*TINY, "logger=csv"], tmp_path)
    task = build_task(cfg)
    run_dir = Path(cfg.paths.output_dir)
    (run_dir / "checkpoints").mkdir(parents=True)
    write_json_atomic(run_dir / "results.json", {"config": OmegaConf.to_container(cfg)})
    torch.save({"state_dict": build_model(cfg, task).state_dict()}, run_dir / "checkpoints/a.ckpt")
    monkeypatch.setattr(memory, "available_bytes", lambda device: 2**10)
    overrides = [f"ckpt_path='{run_dir / 'checkpoints/a.ckpt'}'", "task.eval_lengths=[8,64]"]
    with pytest.raises(ConfigError, match=r"evaluating length 64 .* for the logits alone"):
        evaluate(compose_config(overrides, tmp_path, config_name="eval"))
