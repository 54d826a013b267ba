"""Section 4 (``--only greedy``): Greedy exact-match evaluation with the key/value cache against a
full forward per step, at lengths 64 and 512 (decoder, 2 layers, d_model 64, batch 256)."""

from __future__ import annotations

import statistics
from functools import partial

import torch

from benchmarks.common import Setup, seconds_per_call
from pelab.model_kinds import DecoderKind
from pelab.models.dims import NetDims
from pelab.models.transformer import Transformer
from pelab.pe import PE_REGISTRY
from pelab.positions import contiguous

GREEDY_LENGTHS = (64, 512)


def greedy_eval_times(quick: bool) -> dict[str, dict]:
    """Seconds of greedy exact-match evaluation (copy, one batch; a decoder with 2 layers,
    d_model 64 and RoPE) with the key/value cache and with a full forward per step, at lengths
    64 and 512 (batch 256; ``--quick``: 8 and 32, batch 16), and how each grows from the first
    length to the last. Without the cache, lengths above 64 are estimated (a full run at 512
    takes over an hour on 2 CPU cores): full forwards timed at 4 evenly spaced prefix lengths,
    their mean times the number of steps."""
    lengths, batch = ((8, 32), 16) if quick else (GREEDY_LENGTHS, 256)
    torch.manual_seed(0)
    longest = 2 * max(lengths) + 2
    dims = NetDims(vocab_size=35, max_len=longest, d_model=64, n_layers=2)
    net = Transformer(dims, partial(PE_REGISTRY["rope"]), causal=True)
    net.eval()
    rows: dict[str, dict] = {}
    seconds: dict[int, dict[str, float]] = {}  # unrounded, for the growth
    with torch.inference_mode():
        for use_cache in (True, False):  # warm-up
            DecoderKind.predict(
                net, torch.randint(3, 35, (batch, 8)), 8, contiguous(18), use_cache=use_cache
            )
        for n in lengths:
            prompt = torch.randint(3, 35, (batch, n))  # copy: the answer is the prompt

            def evaluate(use_cache: bool, n: int = n, prompt: torch.Tensor = prompt) -> float:
                positions = contiguous(2 * n + 2)
                answer = DecoderKind.predict(net, prompt, n, positions, use_cache=use_cache)
                return (answer == prompt).all(dim=-1).float().mean().item()

            cached = seconds_per_call(lambda: evaluate(True), 0.0, 1)
            if n <= 64:
                full, estimated = seconds_per_call(lambda: evaluate(False), 0.0, 1), False
            else:  # step i feeds n + 2 + i tokens, i = 0 .. n - 1
                sizes = torch.linspace(n + 2, 2 * n + 1, 4).round().int().tolist()
                per_step = [
                    seconds_per_call(lambda s=s: net(torch.randint(3, 35, (batch, s))), 0.0, 1)
                    for s in sizes
                ]
                full, estimated = statistics.mean(per_step) * n, True
            seconds[n] = {"cached": cached, "full_forwards": full}
            rows[str(n)] = {
                "batch": batch,
                "cached_s": round(cached, 2),
                "full_forwards_s": round(full, 1),
                "full_forwards_estimated": estimated,
                "speedup": round(full / cached, 1),
            }
            print(
                f"{n:>7}{batch:>7}{cached:>12.2f}{full:>14.1f}{'*' if estimated else ' '}"
                f"{full / cached:>9.1f}",
                flush=True,
            )
    first, last = seconds[lengths[0]], seconds[lengths[-1]]
    growth = {key: round(last[key] / first[key], 1) for key in first}
    print(f"growth {lengths[0]} -> {lengths[-1]}: {growth}  (* estimated)")
    return {"lengths": rows, "growth": growth}


def section(args, setup: Setup) -> dict:
    """``greedy_eval``: cached against full-forward greedy evaluation per length."""
    print(f"\n{'length':>7}{'batch':>7}{'cached s':>12}{'full fwd s':>14}{'speedup':>9}")
    return {"greedy_eval": greedy_eval_times(setup.quick)}
