"""Evaluation memory, measured before training by running the run's own model once at the
longest length: the counted peak agrees with the process's resident memory, the extrapolation
from 1 and 2 sequences (used when the full batch might not fit) bounds the peak at the full
batch, and every shipped preset's longest evaluation fits in 24 GiB (a length that cannot fit
is refused before training: ``test_bad_input.py``)."""

from __future__ import annotations

import ctypes
import multiprocessing
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from pelab.assembly import build_model, build_task
from pelab.reliability import memory
from tests.conftest import CONFIG_DIR, compose_config
from tests.test_configs import options

CLEAR_REFS = Path("/proc/self/clear_refs")


def tiny_eval(pe: str, batch: int = 8, length: int = 128):
    cfg = compose_config([f"pe={pe}", "model=encoder", "model.net.n_heads=8"])
    cfg.task.eval_lengths, cfg.data.eval_batch_size = [8, length], batch
    task = build_task(cfg)
    return cfg, task, build_model(cfg, task)


def _resident_peak(pe: str, queue) -> None:
    """In a fresh child process: the peak resident memory one forward pass adds (Linux)."""
    cfg, task, model = tiny_eval(pe, batch=16, length=256)
    counted = memory.forward_peak(model, task, 16, "cpu")  # also warms caches up

    def resident(field: str) -> int:
        line = next(x for x in Path("/proc/self/status").read_text().splitlines() if field in x)
        return int(line.split()[1]) * 1024

    ctypes.CDLL("libc.so.6").malloc_trim(0)
    CLEAR_REFS.write_text("5")  # restart the peak (VmHWM) from the current size
    before = resident("VmRSS:")
    memory.forward_peak(model, task, 16, "cpu")
    queue.put((counted, resident("VmHWM:") - before))


@pytest.mark.skipif(not (sys.platform == "linux" and CLEAR_REFS.exists()), reason="Linux /proc")
@pytest.mark.parametrize("pe", ["rope", "shaw"])  # fused and eager attention
@pytest.mark.integration
def test_the_counted_peak_agrees_with_resident_memory(pe):
    """At a size where memory matters (16 sequences of 514 tokens); the allocator's slack, which
    ``MARGIN`` covers, weighs more in small batches."""
    context = multiprocessing.get_context("spawn")  # fork can deadlock a threaded torch
    queue = context.Queue()
    child = context.Process(target=_resident_peak, args=(pe, queue))
    child.start()
    counted, resident = queue.get(timeout=300)
    child.join(timeout=60)
    assert 0.8 * counted <= resident <= memory.MARGIN * counted + 16 * 2**20, (counted, resident)


@pytest.mark.parametrize("pe", ["alibi", "shaw"])  # a fused bias, the eager path
def test_the_extrapolation_from_one_and_two_sequences_bounds_the_full_batch(pe, monkeypatch):
    cfg, task, model = tiny_eval(pe, batch=8)
    measured = memory.forward_peak(model, task, 8, "cpu")
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
    measured = memory.forward_peak(model, task, 4, "cpu")
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
    with caplog.at_level("WARNING", logger="pelab.reliability.memory"):
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
