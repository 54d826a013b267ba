"""Section 6 (``--only threads``): Threads: median ms per training step (pelab's own,
``benchmarks.common.PelabStep``: forward, backward, clipping, AdamW) of the decoder Transformer
(RoPE, copy at length 16) at d_model/layers/batch 64/2/32 (the CPU presets), 64/2/64 (the
default run), 128/4/64, 256/4/64 and 512/6/64, with 1, 2, 4, ... torch threads up to this
machine's cores, in interleaved rounds, and each count's speed-up over one thread; on the
machine as it is, then busy (beside another torch process): what ``pelab.threads`` chooses by
(docs/performance.md, "Threads")."""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import sys
import time

import torch

from benchmarks.common import PelabStep, Setup, pelab_config, shape_overrides
from pelab.threads import available_cores, choose_threads, set_threads

# (d_model, n_layers, batch): the CPU presets, the default run, then larger models
THREAD_SIZES = ((64, 2, 32), (64, 2, 64), (128, 4, 64), (256, 4, 64), (512, 6, 64))
THREAD_LENGTH = 16  # copy at its longest default training length: 34 tokens per sequence
BATCHES = 8  # the batches a size cycles through
# "busy": another torch process computing beside the timed one, at torch's default threads (one
# per core), as another job or a test suite would
COMPETITOR = (
    "import torch\na = torch.randn(128, 128)\nprint('ready', flush=True)\n"
    "while True:\n    a = torch.tanh(a @ a)\n"
)


def thread_counts(cores: int) -> list[int]:
    """1, 2, 4, ... up to ``cores``, and ``cores`` itself."""
    counts = [1]
    while counts[-1] * 2 <= cores:
        counts.append(counts[-1] * 2)
    return counts if counts[-1] == cores else [*counts, cores]


@contextlib.contextmanager
def competing_process():
    """``COMPETITOR`` running in another process (started, and torch imported) until the end."""
    proc = subprocess.Popen(
        [sys.executable, "-c", COMPETITOR],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        proc.stdout.readline()  # "ready"
        yield
    finally:
        proc.kill()
        proc.wait()


def _thread_pass(
    models: dict, counts: list[int], rounds: int, steps: int, min_seconds: float
) -> dict[tuple, dict[str, float]]:
    """Median ms per step of every model with every thread count, interleaved by round: each
    round times at least ``steps`` steps and ``min_seconds`` of them, after one warm-up step."""
    times: dict[tuple, dict[int, list[float]]] = {size: {n: [] for n in counts} for size in models}
    for _ in range(rounds):
        for size, step in models.items():
            for n in counts:
                set_threads(n, step.model.net.num_params()["total"])
                timed, i = 0.0, 0
                while i <= steps or timed < min_seconds:
                    batch = step.batch(i % BATCHES)
                    start = time.perf_counter()
                    step(batch)
                    if i:  # step 0 warms up
                        times[size][n].append(time.perf_counter() - start)
                        timed += times[size][n][-1]
                    i += 1
    return {
        size: {str(n): 1e3 * statistics.median(t) for n, t in by_count.items()}
        for size, by_count in times.items()
    }


def thread_step_times(quick: bool) -> dict:
    """Median ms per training step (pelab's own) of the decoder Transformer (RoPE,
    copy at ``THREAD_LENGTH``) at each of ``THREAD_SIZES`` with each of ``thread_counts`` torch
    threads, interleaved by round (so a drift of the machine's load hits every count alike), and
    each count's speed-up over one thread: on the machine as it is, then ``busy``, beside a
    ``competing_process`` (fewer steps: a busy step with threads competing can take seconds)."""
    previous = torch.get_num_threads()
    cores = available_cores()
    counts = thread_counts(cores)[: 2 if quick else None]
    sizes = THREAD_SIZES[:1] if quick else THREAD_SIZES
    # (rounds, steps, seconds) of a count in a round: idle, then busy
    idle, busy_pass = ((1, 1, 0.0), (1, 1, 0.0)) if quick else ((3, 5, 0.5), (2, 3, 2.0))
    n = THREAD_LENGTH
    lengths = (f"task.train_lengths=[{n},{n}]", f"task.eval_lengths=[{n}]")
    models = {size: PelabStep(pelab_config(*shape_overrides(*size), *lengths)) for size in sizes}
    try:
        as_is = _thread_pass(models, counts, *idle)
        with competing_process():
            busy = _thread_pass(models, counts, *busy_pass)
    finally:
        set_threads(previous, None)
    rows = {}
    for size, step in models.items():
        d, layers, batch = size
        params = step.model.net.num_params()["total"]
        auto = str(choose_threads("auto", params, cores)[0])
        rows[f"d_model={d} n_layers={layers} batch={batch}"] = {
            "params": params,
            # what threads=auto takes, and its step rate beside the competitor over alone
            "auto": int(auto),
            "auto_busy_vs_alone": round(as_is[size][auto] / busy[size][auto], 2),
            "ms_per_step": {n: round(v, 1) for n, v in as_is[size].items()},
            "speedup_vs_1": {n: round(as_is[size]["1"] / v, 2) for n, v in as_is[size].items()},
            "busy_ms_per_step": {n: round(v, 1) for n, v in busy[size].items()},
            "busy_speedup_vs_1": {n: round(busy[size]["1"] / v, 2) for n, v in busy[size].items()},
        }
    keys = ("rounds", "min_steps", "min_seconds")
    return {
        "cores": cores,
        "length": THREAD_LENGTH,
        "as_is": dict(zip(keys, idle, strict=True)),
        "busy": dict(zip(keys, busy_pass, strict=True)),
        "sizes": rows,
    }


def section(args, setup: Setup) -> dict:
    """``threads``: ms per step per size and thread count, alone and beside a busy process."""
    threads = thread_step_times(setup.quick)
    counts = list(next(iter(threads["sizes"].values()))["ms_per_step"])
    print(
        f"\n{'threads: ms/step (speed-up over 1)':<34}{'params':>11}"
        + "".join(f"{n + ' thr':>16}" for n in counts)
        + "".join(f"{n + ' thr, busy':>18}" for n in counts)
    )
    for label, r in threads["sizes"].items():
        cells = [
            f"{r[f'{side}ms_per_step'][n]:.1f} ({r[f'{side}speedup_vs_1'][n]:.2f}x)"
            for side in ("", "busy_")
            for n in counts
        ]
        print(
            f"{label:<34}{r['params']:>11,}"
            + "".join(f"{c:>16}" for c in cells[: len(counts)])
            + "".join(f"{c:>18}" for c in cells[len(counts) :])
        )
    a, b = threads["as_is"], threads["busy"]
    print(
        f"({threads['cores']} cores; copy at length {threads['length']}; medians over "
        f"{a['rounds']} rounds of >= {a['min_steps']} steps and {a['min_seconds']} s per "
        f"count; busy: beside another torch process, {b['rounds']} rounds of >= "
        f"{b['min_steps']} steps and {b['min_seconds']} s)"
    )
    for label, r in threads["sizes"].items():
        print(
            f"threads=auto takes {r['auto']} at {label}: busy step rate "
            f"{r['auto_busy_vs_alone']:.2f}x of its rate alone"
        )
    return {"threads": threads}
