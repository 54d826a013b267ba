"""Training throughput of pelab, side by side in one run.

1. pelab against a minimal hand-written PyTorch loop and (RoPE; ``pip install -e .[bench]``)
   against x-transformers: all train the same decoder shape on the same copy batches, pelab
   through its LightningModule and Trainer, the others in a plain loop (fused attention, AdamW,
   clipping, LR schedule). The sides run in alternating rounds; we report the median tokens/s
   over timing windows after warm-up. The full mode adds pelab's RoPE run with
   ``trainer.precision=bf16-mixed`` and with ``model.compile=true``.
2. Every registered encoding's training step (forward, backward, AdamW) relative to ``none`` on
   the same model and batches, in interleaved rounds, with its parameter count.
3. Data generation: samples/s that every registered task (and declared variant) generates at
   lengths 64 and 512, against the samples/s a training step of the default model consumes at
   the same length (target: at least 10x, so generation never limits training).
4. Greedy exact-match evaluation with the key/value cache against a full forward per step, at
   lengths 64 and 512 (decoder, 2 layers, d_model 64, batch 256).
5. Members (``seeds=[...]``): the aggregate training throughput of K = 1, 2, 4, 8 members in
   one stacked network (``pelab.models.stacked``) against K single-member models stepped one
   after another (same models, same batches; one torch thread, as one job per core runs), for
   ``none``, ``rope``, ``alibi``, ``t5_bias`` (parameters held per member) and ``shaw`` (eager
   attention), at the CPU presets' shape (d_model 64, 2 layers, batch 32, copy at lengths 1-8),
   beside the bound: one model with K times the batch.
6. Threads (``--only threads``): median ms per training step (forward, backward, AdamW) of the
   decoder Transformer (RoPE, copy at length 16) at d_model/layers/batch 64/2/32 (the CPU
   presets), 64/2/64 (the default run), 128/4/64, 256/4/64 and 512/6/64, with 1, 2, 4, ...
   torch threads up to this machine's cores, in interleaved rounds, and each count's speed-up
   over one thread; on the machine as it is, then busy (beside another torch process): what
   ``pelab.threads`` chooses by (docs/performance.md, "Threads").
7. With ``--ablation``: the wall time of ``experiment=ablation_cpu`` (every job, on this
   machine) and the share of its (encoding, task) cells learned in distribution.

    python scripts/benchmark.py            # full: 4 layers, d_model 128, 64 tokens, batch 64
    python scripts/benchmark.py --quick    # a smoke run in seconds
    python scripts/benchmark.py --only threads   # one section
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from torch import nn

from pelab.analysis.collect import directory_records, runs_frame
from pelab.assembly import build_model, build_task
from pelab.data.datamodule import TaskData, TrainBatches
from pelab.lit_module import SequenceModel, clip_member_norms, warmup_cosine
from pelab.model_kinds import DecoderKind
from pelab.models.stacked import MemberEncodings, stack
from pelab.models.transformer import Transformer
from pelab.pe import PE_REGISTRY
from pelab.positions import contiguous
from pelab.tasks import TASK_REGISTRY
from pelab.threads import available_cores, choose_threads, set_threads
from pelab.tokens import N_SPECIAL


class MinimalBlock(nn.Module):
    def __init__(self, d: int, heads: int, rope: bool) -> None:
        super().__init__()
        self.heads, self.rope = heads, rope
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        if self.rope:
            q, k = (
                torch.view_as_real(
                    torch.view_as_complex(t.unflatten(-1, (-1, 2))) * freqs
                ).flatten(-2)
                for t in (q, k)
            )
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.ln2(x))


class MinimalDecoder(nn.Module):
    def __init__(self, vocab: int, d: int, heads: int, layers: int, rope: bool) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(MinimalBlock(d, heads, rope) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        self.inv_freq = 10000.0 ** (-torch.arange(0, d // heads, 2).float() / (d // heads))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        angles = torch.arange(tokens.shape[1]).float()[:, None] * self.inv_freq
        freqs = torch.polar(torch.ones_like(angles), angles)
        x = self.emb(tokens)
        for block in self.blocks:
            x = block(x, freqs)
        return self.head(self.ln(x))


def minimal_loop(batches, shape, rope: bool, steps: int, window: int) -> list[float]:
    torch.manual_seed(0)
    model = MinimalDecoder(shape["vocab"], shape["d"], shape["heads"], shape["layers"], rope)
    return plain_loop(model, batches, steps, window)


def xtransformers_loop(batches, shape, steps: int, window: int) -> list[float] | None:
    """The same RoPE decoder built with x-transformers (``pip install -e .[bench]``): pre-norm,
    head dim ``d / heads``, RoPE on every head dim, no absolute embedding, fused attention."""
    try:
        from x_transformers import Decoder, TransformerWrapper
    except ImportError:
        return None
    torch.manual_seed(0)
    d, heads = shape["d"], shape["heads"]
    layers = Decoder(
        dim=d,
        depth=shape["layers"],
        heads=heads,
        attn_dim_head=d // heads,
        rotary_pos_emb=True,
        rotary_emb_dim=d // heads,
        attn_flash=True,
    )
    model = TransformerWrapper(
        num_tokens=shape["vocab"],
        max_seq_len=2 * shape["length"] + 2,
        attn_layers=layers,
        use_abs_pos_emb=False,
    )
    return plain_loop(model, batches, steps, window)


def plain_loop(model: nn.Module, batches, steps: int, window: int) -> list[float]:
    """A hand-written training loop: AdamW, clipping, warmup + cosine; timestamps every
    ``window`` steps."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98), weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(100, steps, 0.1))
    stamps = []
    for i in range(steps):
        prompt, answer = batches[i]
        inputs, answer_slice = DecoderKind.teacher_forcing(prompt, answer)
        logits = model(inputs)[:, answer_slice]
        loss = F.cross_entropy(logits.flatten(0, 1), answer.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if i % window == 0:
            stamps.append(time.perf_counter())
    return stamps


class Stamps(L.Callback):
    def __init__(self, window: int) -> None:
        self.window, self.stamps = window, []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        if batch_idx % self.window == 0:
            self.stamps.append(time.perf_counter())


def pelab_loop(
    task,
    shape,
    pe: str,
    steps: int,
    window: int,
    tmp: Path,
    precision: str = "32-true",
    compile: bool = False,
) -> list[float]:
    L.seed_everything(0, verbose=False)
    net = Transformer(
        task.vocab_size,
        task.max_sequence_length(),
        True,
        partial(PE_REGISTRY[pe]),
        d_model=shape["d"],
        n_heads=shape["heads"],
        n_layers=shape["layers"],
    )
    optimizer = partial(torch.optim.AdamW, lr=1e-3, betas=(0.9, 0.98), weight_decay=0.01)
    module = SequenceModel(net, DecoderKind, task, optimizer, compile=compile)
    data = TaskData(task, shape["batch"], steps, seeds=0)
    stamps = Stamps(window)
    trainer = L.Trainer(
        max_steps=steps,
        accelerator="cpu",
        precision=precision,
        logger=False,
        callbacks=[stamps],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        gradient_clip_val=1.0,
        default_root_dir=str(tmp),
    )
    trainer.fit(module, datamodule=data)
    if compile and module.train_logits.failed:  # it fell back to eager: that is no measurement
        raise RuntimeError(f"torch.compile failed: {module.train_logits.failed}")
    return stamps.stamps


def tokens_per_second(stamps: list[float], window: int, tokens: int, warmup: int) -> list[float]:
    gaps = [b - a for a, b in zip(stamps[warmup:], stamps[warmup + 1 :], strict=False)]
    return [window * tokens / g for g in gaps]


def encoding_step_times(
    batches, shape, steps: int, rounds: int, names: list[str] | None = None
) -> dict[str, dict]:
    """Median ms per training step of every 1-D encoding (2-D ones need a grid task), or of
    ``names`` beside ``none`` (the baseline of every ratio), interleaved by round."""
    task_len = 2 * shape["length"] + 2
    # the copy task has no digits: its symbols stand in for them, so that abacus, which indexes
    # the digits of numbers, runs (its cost does not depend on which tokens are digits)
    digits = tuple(range(N_SPECIAL, shape["vocab"]))
    models = {}
    for name, cls in sorted(PE_REGISTRY.items()):
        if cls.position_dims == 2 or (names and name not in {"none", *names}):
            continue
        torch.manual_seed(0)
        net = Transformer(
            shape["vocab"],
            task_len,
            True,
            partial(cls),
            d_model=shape["d"],
            n_heads=shape["heads"],
            n_layers=shape["layers"],
            digit_tokens=digits,
        )
        models[name] = (net, torch.optim.AdamW(net.parameters(), lr=1e-3))
    times: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(rounds):
        for name, (net, opt) in models.items():
            for i in range(steps + 1):  # the first step of each round warms up
                prompt, answer = batches[i]
                start = time.perf_counter()
                inputs, answer_slice = DecoderKind.teacher_forcing(prompt, answer)
                loss = F.cross_entropy(
                    net(inputs)[:, answer_slice].flatten(0, 1), answer.flatten()
                )
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                if i:
                    times[name].append(time.perf_counter() - start)
    base = statistics.median(times["none"])
    return {
        name: {
            "ms_per_step": round(1e3 * statistics.median(t), 1),
            "vs_none": round(statistics.median(t) / base, 3),
            "pe_params": models[name][0].num_params()["pe"],
            "attention": "eager" if models[name][0].pe.needs_eager_attention() else "fused",
        }
        for name, t in times.items()
    }


DATA_LENGTHS = (64, 512)
QUICK_DATA_LENGTHS = (16,)  # a smoke run: short sequences, one timed step
MAX_STEP_TOKENS = 4096  # longer sequences: generation is timed, the training step is not


def seconds_per_call(fn, min_seconds: float, min_calls: int) -> float:
    """Mean wall time of ``fn()`` after one warm-up call, over at least ``min_calls`` calls and
    ``min_seconds`` seconds."""
    fn()
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if calls >= min_calls and elapsed >= min_seconds:
            return elapsed / calls


def generation_vs_training(
    name: str, variant: dict, length: int, quick: bool, scratch: Path
) -> dict:
    """Samples/s that ``task.sample`` generates and that a training step of the default model
    (configs/train.yaml: decoder, RoPE, batch ``data.batch_size``) consumes, at ``length``."""
    settings = {**TASK_REGISTRY[name].settings_at(length, scratch), **variant}
    overrides = [
        f"task={name}",
        f"task.train_lengths=[{length},{length}]",
        f"task.eval_lengths=[{length}]",
        *(f"task.{k}={json.dumps(v)}" for k, v in settings.items()),
    ]
    try:
        cfg = compose("train", overrides=overrides)
        task = build_task(cfg)
    except Exception as error:  # a task that cannot be built at this length is skipped
        return {"note": f"skipped: {type(error).__name__}: {str(error).splitlines()[0]}"}
    batch, generator = cfg.data.batch_size, torch.Generator().manual_seed(0)
    sample_s = seconds_per_call(
        lambda: task.sample(batch, length, generator), 0.02 if quick else 0.3, 3
    )
    tokens = task.prompt_length(length) + task.answer_length(length) + 2
    row = {"tokens": tokens, "generated_per_s": round(batch / sample_s)}
    if tokens > MAX_STEP_TOKENS:
        return {**row, "note": f"training step not timed: {tokens} tokens per sequence"}
    try:
        model = build_model(cfg, task)
    except Exception as error:
        return {**row, "note": f"no default model: {type(error).__name__}: {error}"}
    optimizer = torch.optim.AdamW(model.net.parameters(), lr=1e-3)
    prompt, answer = task.sample(batch, length, generator)

    def step() -> None:  # what SequenceModel.training_step and the optimizer do
        positions = model.sequence_positions(prompt, answer.shape[1])
        logits = model.kind.answer_logits(model.net, prompt, answer, positions)
        loss = F.cross_entropy(logits.flatten(0, 1), answer.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    step_s = seconds_per_call(step, 0.0, 1 if quick else 2)
    row.update(trained_per_s=round(batch / step_s, 1), ratio=round(step_s / sample_s, 1))
    return row


def data_generation(quick: bool) -> dict[str, dict]:
    """Every registered task and declared variant at lengths 64 and 512 (16 only with
    ``--quick``; a task with a bounded length axis at most at its ``max_length``): generated vs
    consumed samples/s; the target is a ratio >= 10."""
    config_dir = str(Path(__file__).resolve().parents[1] / "configs")
    rows = {}
    with (
        initialize_config_dir(config_dir=config_dir, version_base="1.3"),
        tempfile.TemporaryDirectory() as scratch,
    ):
        for name in sorted(TASK_REGISTRY):
            for variant in ({}, *TASK_REGISTRY[name].variants):
                label = " ".join([name, *(f"{k}={v}" for k, v in variant.items())])
                bound = TASK_REGISTRY[name].max_length  # a bounded length axis: its longest
                lengths = QUICK_DATA_LENGTHS if quick else DATA_LENGTHS
                for length in sorted({min(n, bound or n) for n in lengths}):
                    row = generation_vs_training(name, variant, length, quick, Path(scratch))
                    rows[f"{label} @ {length}"] = row
                    print(
                        f"{label:<34}{length:>7}{row.get('generated_per_s', 0):>14,}"
                        f"{row.get('trained_per_s', 0):>12,.1f}{row.get('ratio', 0):>9,.1f}"
                        f"  {row.get('note', '')}",
                        flush=True,
                    )
    return rows


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
    net = Transformer(35, longest, True, partial(PE_REGISTRY["rope"]), d_model=64, n_layers=2)
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


MEMBER_ENCODINGS = ("none", "rope", "alibi", "t5_bias", "shaw")  # t5_bias: parameters per member
MEMBER_COUNTS = (1, 2, 4, 8)
DEFAULT_RUN = "rope, batch 64, 1-16"  # the default run's shape, as seeds=[0,1,2] trains it


def member_throughput(quick: bool) -> dict[str, dict]:
    """Member steps per second of K members in one stacked network, K single-member models
    stepped one after another and the bound (one model, K x the batch), interleaved by round,
    one torch thread (as one job per core runs)."""
    threads = torch.get_num_threads()
    task = TASK_REGISTRY["copy"](train_lengths=[1, 8], eval_lengths=[8])
    set_threads(1, None)
    encodings, counts = (("none", "rope"), (1, 2)) if quick else (MEMBER_ENCODINGS, MEMBER_COUNTS)
    steps, rounds = (2, 1) if quick else (20, 3)
    results: dict[str, dict] = {}
    try:
        for pe in encodings:
            results[pe] = {}
            for k in counts:
                results[pe][k] = _member_sides(task, pe, k, steps, rounds)
        if not quick:  # the default run's shape: batch 64, copy at lengths 1-16, seeds=[0,1,2]
            default = TASK_REGISTRY["copy"](train_lengths=[1, 16], eval_lengths=[16])
            results[DEFAULT_RUN] = {3: _member_sides(default, "rope", 3, steps, rounds, 64)}
    finally:
        set_threads(threads, None)
    return results


def _members_model(task, pe: str, seeds: list[int]) -> SequenceModel:
    """The CPU presets' decoder (d_model 64, 2 layers) of ``seeds``, stacked as training
    stacks them (each member seeded, then built)."""
    nets = []
    for seed in seeds:
        L.seed_everything(seed, verbose=False)
        nets.append(
            Transformer(
                task.vocab_size,
                task.max_sequence_length(),
                True,
                partial(PE_REGISTRY[pe]),
                d_model=64,
            )
        )
    optimizer = partial(torch.optim.AdamW, lr=1e-3, betas=(0.9, 0.98), weight_decay=0.01)
    return SequenceModel(stack(nets), DecoderKind, task, optimizer, seeds=seeds)


def _member_sides(task, pe: str, k: int, steps: int, rounds: int, batch: int = 32) -> dict:
    seeds = list(range(k))
    sides = {
        "stacked": [(_members_model(task, pe, seeds), seeds, batch)],
        "sequential": [(_members_model(task, pe, [seed]), [seed], batch) for seed in seeds],
        "bound": [(_members_model(task, pe, [0]), [0], batch * k)],
    }
    steppers = {
        name: [_stepper(task, *model) for model in models] for name, models in sides.items()
    }
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(rounds):  # the sides alternate, so drifts of the machine hit them alike
        for name, stepped in steppers.items():
            for step in stepped:
                step(0)  # warm-up
            for i in range(1, steps + 1):
                start = time.perf_counter()
                for step in stepped:
                    step(i)
                times[name].append(time.perf_counter() - start)
    per_s = {name: k / statistics.median(t) for name, t in times.items()}
    return {
        "stacked_encodings": sum(
            isinstance(m, MemberEncodings) for m in sides["stacked"][0][0].modules()
        ),
        **{f"{name}_member_steps_per_s": round(v, 1) for name, v in per_s.items()},
        "stacked_vs_sequential": round(per_s["stacked"] / per_s["sequential"], 3),
        "bound_vs_sequential": round(per_s["bound"] / per_s["sequential"], 3),
        "stacked_vs_bound": round(per_s["stacked"] / per_s["bound"], 3),
    }


def _stepper(task, model: SequenceModel, seeds: list[int], batch: int):
    """One training step of ``model`` as the engine takes it: each member's batch (a shared
    length), the members' summed losses, each member's gradient clipped, AdamW."""
    data = [TrainBatches(task, batch, 10_000, seed, "tokens") for seed in seeds]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(i: int) -> None:
        losses = model.member_losses([d[i] for d in data], i)
        optimizer.zero_grad(set_to_none=True)
        torch.stack(list(losses.values())).sum().backward()
        clip_member_norms(model.net, 1.0)
        optimizer.step()

    return step


# (d_model, n_layers, batch): the CPU presets, the default run, then larger models
THREAD_SIZES = ((64, 2, 32), (64, 2, 64), (128, 4, 64), (256, 4, 64), (512, 6, 64))
THREAD_LENGTH = 16  # copy at its longest default training length: 34 tokens per sequence
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
        for size, (net, opt, data) in models.items():
            for n in counts:
                set_threads(n, net.num_params()["total"])
                timed, i = 0.0, 0
                while i <= steps or timed < min_seconds:
                    prompt, answer = data[i % len(data)]
                    start = time.perf_counter()
                    inputs, answer_slice = DecoderKind.teacher_forcing(prompt, answer)
                    logits = net(inputs)[:, answer_slice]
                    loss = F.cross_entropy(logits.flatten(0, 1), answer.flatten())
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    if i:  # step 0 warms up
                        times[size][n].append(time.perf_counter() - start)
                        timed += times[size][n][-1]
                    i += 1
    return {
        size: {str(n): 1e3 * statistics.median(t) for n, t in by_count.items()}
        for size, by_count in times.items()
    }


def thread_step_times(quick: bool) -> dict:
    """Median ms per training step (forward, backward, AdamW) of the decoder Transformer (RoPE,
    copy at ``THREAD_LENGTH``) at each of ``THREAD_SIZES`` with each of ``thread_counts`` torch
    threads, interleaved by round (so a drift of the machine's load hits every count alike), and
    each count's speed-up over one thread: on the machine as it is, then ``busy``, beside a
    ``competing_process`` (fewer steps: a busy step with threads competing can take seconds)."""
    previous = torch.get_num_threads()
    cores = available_cores()
    counts = thread_counts(cores)[: 2 if quick else None]
    sizes = THREAD_SIZES[:1] if quick else THREAD_SIZES
    # (rounds, steps, seconds) of a count in a round: idle, then busy
    idle, busy_pass = ((1, 2, 0.0), (1, 2, 0.0)) if quick else ((3, 5, 0.5), (2, 3, 2.0))
    task = TASK_REGISTRY["copy"](
        train_lengths=[THREAD_LENGTH, THREAD_LENGTH], eval_lengths=[THREAD_LENGTH]
    )
    models = {}
    for d, layers, batch in sizes:
        torch.manual_seed(0)
        net = Transformer(
            task.vocab_size,
            task.max_sequence_length(),
            True,
            partial(PE_REGISTRY["rope"]),
            d_model=d,
            n_layers=layers,
        )
        generator = torch.Generator().manual_seed(0)
        data = [task.sample(batch, THREAD_LENGTH, generator) for _ in range(8)]
        models[(d, layers, batch)] = (net, torch.optim.AdamW(net.parameters(), lr=1e-3), data)
    try:
        as_is = _thread_pass(models, counts, *idle)
        with competing_process():
            busy = _thread_pass(models, counts, *busy_pass)
    finally:
        set_threads(previous, None)
    rows = {}
    for size, (net, _, _) in models.items():
        d, layers, batch = size
        params = net.num_params()["total"]
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


STACK_RUN = [  # the default run (pe=rope task=copy), a fixed budget, nothing logged
    "trainer.max_steps=400",
    "learned_at=null",
    "logger=none",
    "trainer.enable_progress_bar=false",
]


def stack_wall_time(out: Path, seeds: tuple[int, ...] = (0, 1, 2)) -> dict:
    """Wall seconds of ``seeds=[...]`` as one job against the single runs of those seeds one
    after another (the same config, each a fresh process, as a user runs them)."""

    def timed(*overrides: str) -> float:
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "scripts/train.py", *STACK_RUN, *overrides],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=True,
        )
        return time.perf_counter() - start

    listed = ",".join(map(str, seeds))
    stacked = timed(f"seeds=[{listed}]", f"hydra.run.dir={out}/stack")
    singles = [timed(f"seed={seed}", f"hydra.run.dir={out}/seed_{seed}") for seed in seeds]
    return {
        "seeds": list(seeds),
        "stack_s": round(stacked, 1),
        "singles_s": [round(t, 1) for t in singles],
        "stack_vs_singles": round(stacked / sum(singles), 3),
        "stack_vs_one": round(stacked / statistics.median(singles), 2),
    }


def ablation_wall_time(out: Path) -> dict:
    """``experiment=ablation_cpu`` run whole into ``out``: its wall time and learned cells."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "scripts/train.py", "experiment=ablation_cpu", f"hydra.sweep.dir={out}"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    runs = runs_frame(directory_records(out))
    done = runs[runs["status"] == "completed"]
    cells = done.groupby(["pe", "task"])["learned"].agg(lambda v: bool(v.all()))
    return {
        "wall_s": round(wall),
        "exit_status": proc.returncode,
        "runs": len(runs),
        "completed": len(done),
        "cells": len(cells),
        "cells_learned": int(cells.sum()),
    }


def throughput(
    task,
    shape: dict,
    batches,
    steps: int,
    window: int,
    warmup: int,
    tokens: int,
    rounds: int,
    quick: bool,
    tmp: Path,
) -> dict[str, dict]:
    """Section 1: pelab against the minimal loop and x-transformers (and pelab's options)."""
    vocab = task.vocab_size
    results: dict[str, dict] = {}
    sides = {"none": ("pelab", "minimal"), "rope": ("pelab", "minimal", "x-transformers")}
    if not quick:  # pelab's options, on the same RoPE run
        sides["rope"] += ("pelab bf16-mixed", "pelab compile")
    for pe, names in sides.items():
        speeds: dict[str, list[float]] = {name: [] for name in names}
        failed: dict[str, str] = {}
        for _ in range(rounds):  # the sides alternate, so drifts of the machine hit them alike
            loops = {
                "pelab": lambda pe=pe: pelab_loop(task, shape, pe, steps, window, tmp),
                "minimal": lambda pe=pe: minimal_loop(
                    batches, {**shape, "vocab": vocab}, pe == "rope", steps, window
                ),
                "x-transformers": lambda: xtransformers_loop(
                    batches, {**shape, "vocab": vocab}, steps, window
                ),
                "pelab bf16-mixed": lambda pe=pe: pelab_loop(
                    task, shape, pe, steps, window, tmp, precision="bf16-mixed"
                ),
                "pelab compile": lambda pe=pe: pelab_loop(
                    task, shape, pe, steps, window, tmp, compile=True
                ),
            }
            for name in names:
                if name in failed:
                    continue
                try:
                    stamps = loops[name]()
                except Exception as error:
                    if name in REQUIRED:
                        raise
                    # an optional side that fails (e.g. compile on a machine whose compiler
                    # cannot build the kernel) is reported, and the benchmark goes on
                    failed[name] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
                    print(f"{pe} · {name}: failed ({failed[name]}); skipped")
                    continue
                if stamps is not None:
                    speeds[name] += tokens_per_second(stamps, window, tokens, warmup)
        med = {k: statistics.median(v) for k, v in speeds.items() if v}
        results[pe] = {
            **{f"{k.replace('-', '')}_tokens_per_s": round(v) for k, v in med.items()},
            "ratio": round(med["pelab"] / med["minimal"], 3),
            "windows": len(speeds["pelab"]),
        }
        if "x-transformers" in med:
            results[pe]["ratio_vs_xtransformers"] = round(med["pelab"] / med["x-transformers"], 3)
        for option in ("bf16-mixed", "compile"):
            if f"pelab {option}" in med:
                results[pe][f"{option}_vs_fp32"] = round(med[f"pelab {option}"] / med["pelab"], 3)
        if failed:
            results[pe]["failed"] = failed
    print(
        f"\n{'encoding':<10}{'pelab tok/s':>14}{'minimal tok/s':>16}{'ratio':>8}{'x-tr tok/s':>13}"
    )
    for pe, r in results.items():
        xt = r.get("xtransformers_tokens_per_s")
        print(
            f"{pe:<10}{r['pelab_tokens_per_s']:>14,}{r['minimal_tokens_per_s']:>16,}"
            f"{r['ratio']:>8.3f}{xt if xt else '-':>13}"
            + (f"  pelab/x-transformers {r['ratio_vs_xtransformers']:.3f}" if xt else "")
        )
        for option in ("bf16-mixed", "compile"):
            if f"{option}_vs_fp32" in r:
                print(f"{'':<10}pelab {option}: {r[f'{option}_vs_fp32']:.3f}x the fp32 throughput")
        for name, error in r.get("failed", {}).items():
            print(f"{'':<10}{name}: failed ({error})")
    return results


SECTIONS = ("throughput", "encodings", "data", "greedy", "members", "threads")
REQUIRED = ("pelab", "minimal")  # the comparison itself; the other sides are optional


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few windows: a smoke run")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds per side")
    parser.add_argument("--json", type=Path, default=Path("benchmark.json"))
    parser.add_argument(
        "--only",
        nargs="+",
        choices=SECTIONS,
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
    args = parser.parse_args()
    torch.set_float32_matmul_precision("high")
    shape = dict(d=128, heads=4, layers=4, batch=64, length=31)  # 1 + 31 + 1 + 31 - 1 = 63 tokens
    if args.quick:
        shape.update(d=32, layers=1, batch=16)
    window, windows, warmup = (5, 4, 1) if args.quick else (20, 4, 1)
    rounds = args.rounds or (1 if args.quick else 4)
    steps = window * (windows + warmup) + 1
    n = shape["length"]
    task = TASK_REGISTRY["copy"](train_lengths=[n, n], eval_lengths=[n])
    vocab = task.vocab_size
    tokens = shape["batch"] * (2 * n + 1)
    batches = TrainBatches(task, shape["batch"], steps, 0)
    print(f"shape: {shape}, {tokens} tokens/step, torch threads: {torch.get_num_threads()}")
    results: dict = {}
    tmp = Path(".cache/benchmark")
    if "throughput" in args.only:
        results = throughput(
            task, shape, batches, steps, window, warmup, tokens, rounds, args.quick, tmp
        )
    report: dict = {"shape": shape, "results": results}
    if "encodings" in args.only:
        steps_per_round, enc_rounds = (2, 1) if args.quick else (5, 3)
        encodings = encoding_step_times(
            batches, {**shape, "vocab": vocab}, steps_per_round, enc_rounds, args.encodings
        )
        print(f"\n{'encoding':<20}{'attention':>10}{'ms/step':>10}{'vs none':>9}{'PE params':>11}")
        for name, r in encodings.items():
            print(
                f"{name:<20}{r['attention']:>10}{r['ms_per_step']:>10.1f}{r['vs_none']:>9.3f}"
                f"{r['pe_params']:>11,}"
            )
        report["encodings"] = encodings
    if "data" in args.only:
        print(
            f"\n{'task (data generation)':<34}{'length':>7}{'generated/s':>14}{'trained/s':>12}"
            f"{'ratio':>9}"
        )
        report["data"] = data_generation(args.quick)
    if "greedy" in args.only:
        print(f"\n{'length':>7}{'batch':>7}{'cached s':>12}{'full fwd s':>14}{'speedup':>9}")
        report["greedy_eval"] = greedy_eval_times(args.quick)
    if "members" in args.only:
        report["members"] = members = member_throughput(args.quick)
        print(
            f"\n{'members (1 thread)':<20}{'K':>3}{'stacked/s':>11}{'sequential/s':>14}"
            f"{'bound/s':>9}{'stacked vs seq':>16}{'bound vs seq':>14}{'stacked vs bound':>18}"
        )
        for pe, by_k in members.items():
            for k, r in by_k.items():
                print(
                    f"{pe:<20}{k:>3}{r['stacked_member_steps_per_s']:>11.1f}"
                    f"{r['sequential_member_steps_per_s']:>14.1f}"
                    f"{r['bound_member_steps_per_s']:>9.1f}"
                    f"{r['stacked_vs_sequential']:>16.3f}{r['bound_vs_sequential']:>14.3f}"
                    f"{r['stacked_vs_bound']:>18.3f}"
                )
        if args.stack_wall:
            with tempfile.TemporaryDirectory() as scratch:
                report["stack_wall"] = wall = stack_wall_time(Path(scratch))
            print(
                f"seeds={wall['seeds']} as one job: {wall['stack_s']} s; the single runs one "
                f"after another: {' + '.join(map(str, wall['singles_s']))} s "
                f"({wall['stack_vs_singles']}x of their sum, {wall['stack_vs_one']}x one run)"
            )
    if "threads" in args.only:
        report["threads"] = threads = thread_step_times(args.quick)
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
    if args.ablation:
        report["ablation_cpu"] = ablation_wall_time(tmp / "ablation_cpu")
        a = report["ablation_cpu"]
        print(
            f"\nexperiment=ablation_cpu: {a['wall_s']} s wall, {a['completed']}/{a['runs']} runs "
            f"completed, {a['cells_learned']}/{a['cells']} cells learned in distribution"
        )
    args.json.write_text(json.dumps(report, indent=2))
    print(f"\nwritten to {args.json}")


if __name__ == "__main__":
    main()
