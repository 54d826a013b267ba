"""Training throughput of pelab, side by side in one run.

1. pelab against a minimal hand-written PyTorch loop and (RoPE; ``pip install -e .[bench]``)
   against x-transformers: all train the same decoder shape on the same copy batches, pelab
   through its LightningModule and Trainer (``pelab.trainer.make_trainer``), the others in a
   plain loop (fused attention, AdamW, clipping, LR schedule): the yardsticks. The sides run in
   alternating rounds; we report the median tokens/s over timing windows after warm-up. The
   full mode adds pelab's RoPE run with ``trainer.precision=bf16-mixed`` and with
   ``model.compile=true``.
2. Every registered encoding's training step (pelab's own, ``common.PelabStep``, as in sections
   3, 5 and 6) relative to ``none`` on the same model and batches, in interleaved rounds, with
   its parameter count.
3. Data generation: samples/s that every registered task (and declared variant) generates at
   lengths 64 and 512, against the samples/s a training step of the default model consumes at
   the same length (target: at least 10x, so generation never limits training).
4. Greedy exact-match evaluation with the key/value cache against a full forward per step, at
   lengths 64 and 512 (decoder, 2 layers, d_model 64, batch 256).
5. Members (``seeds=[...]``): the aggregate training throughput of K = 1, 2, 4, 8 members in
   one stacked network (``pelab.models.stacked``) against K single-member models stepped one
   after another (same models, same batches; one torch thread, as one job per core runs), for
   ``none``, ``rope``, ``alibi``, ``t5_bias`` (parameters stacked over the members) and ``shaw``
   (eager attention), at the CPU presets' shape (d_model 64, 2 layers, batch 32, copy at
   lengths 1-8), beside the bound: one model with K times the batch.
6. Threads (``--only threads``): median ms per training step (forward, backward, AdamW) of the
   decoder Transformer (RoPE, copy at length 16) at d_model/layers/batch 64/2/32 (the CPU
   presets), 64/2/64 (the default run), 128/4/64, 256/4/64 and 512/6/64, with 1, 2, 4, ...
   torch threads up to this machine's cores, in interleaved rounds, and each count's speed-up
   over one thread; on the machine as it is, then busy (beside another torch process): what
   ``pelab.threads`` chooses by (docs/performance.md, "Threads").
7. Start-up (``--only startup``): seconds to answer for ``--help``, ``--cfg job``, a misspelt
   choice and a bad value, beside a one-step run (``benchmarks.startup``).
8. Operations (``--only operations``): aten operations and kernel launches of a 40-step run at
   K = 8 members over K = 1, for every encoding of the GPU grid (``benchmarks.operations``).
9. Validation (``--only validation``): one validation by one teacher-forced pass and by greedy
   decoding against the 100 training steps it follows (``benchmarks.validation``).
10. Time split (``--only time_split``): where one ablation job's time goes, and its step's
    GFLOP/s against this core's matmul peak (``benchmarks.time_split``).
11. With ``--ablation``: the wall time of ``experiment=ablation_cpu`` (every job, on this
   machine) and the share of its (encoding, task) cells learned in distribution.

    python scripts/benchmark.py            # full: 4 layers, d_model 128, 64 tokens, batch 64
    python -m benchmarks                   # the same
    python scripts/benchmark.py --quick    # a smoke run in seconds
    python scripts/benchmark.py --only threads   # one section

One file per section in this folder (``throughput``, ``encodings``, ``data``, ``greedy``,
``members``, ``threads``, ``startup``, ``operations``, ``validation``, ``time_split``,
``ablation``), each with
``section(args, setup) -> dict``: its part of the JSON report, printed as a table; ``common``
holds the shared setup and pelab's training step. This module parses the command line and runs
the sections in order.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from benchmarks import (
    ablation,
    data,
    encodings,
    greedy,
    members,
    operations,
    startup,
    threads,
    throughput,
    time_split,
    validation,
)
from benchmarks.common import make_setup
from pelab.pe import PE_REGISTRY

# --only's choices, in the order they run; --ablation adds the last
SECTIONS = {
    "throughput": throughput,
    "encodings": encodings,
    "data": data,
    "greedy": greedy,
    "members": members,
    "threads": threads,
    "startup": startup,
    "operations": operations,
    "validation": validation,
    "time_split": time_split,
}


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/benchmark.py", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="a few windows: a smoke run")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds per side")
    parser.add_argument("--json", type=Path, default=Path("benchmark.json"))
    parser.add_argument(
        "--only",
        nargs="+",
        choices=list(SECTIONS),
        default=list(SECTIONS),
        help="run only these sections (default: all)",
    )
    parser.add_argument(
        "--encodings",
        nargs="+",
        choices=sorted(n for n, c in PE_REGISTRY.items() if c.position_dims != 2),
        help="the encodings section for these only, beside none (default: every 1-D encoding)",
    )
    parser.add_argument(
        "--stack-wall",
        action="store_true",
        help="also time seeds=[0,1,2] as one job against its three single runs (about 2 minutes)",
    )
    parser.add_argument(
        "--ablation",
        action="store_true",
        help="also run experiment=ablation_cpu whole (about 20 minutes on 2 cores) and report "
        "its wall time and learned cells",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    setup = make_setup(args.quick, args.rounds)
    n_threads = torch.get_num_threads()
    print(f"shape: {setup.shape}, {setup.tokens} tokens/step, torch threads: {n_threads}")
    report: dict = {"shape": setup.shape, "results": {}}
    for name, module in SECTIONS.items():
        if name in args.only:
            report |= module.section(args, setup)
    if args.ablation:
        report |= ablation.section(args, setup)
    args.json.write_text(json.dumps(report, indent=2))
    print(f"\nwritten to {args.json}")
