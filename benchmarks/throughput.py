"""Section 1 (``--only throughput``): pelab against a minimal hand-written PyTorch loop and (RoPE;
``pip install -e .[bench]``) against x-transformers: all train the same decoder shape on the
same copy batches, pelab as ``scripts/train.py`` trains it (its model, data and Trainer from
``pelab.assembly`` and ``pelab.trainer.make_trainer``), the others in a plain loop (fused
attention, AdamW, clipping, LR schedule): the yardsticks. The sides run in alternating rounds;
we report the median tokens/s over timing windows after warm-up. The full mode adds pelab's
RoPE run with ``trainer.precision=bf16-mixed`` and with ``model.compile=true``."""

from __future__ import annotations

import statistics
import time

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.common import Setup, pelab_config
from pelab.assembly import build_model, data_module
from pelab.model_kinds import DecoderKind
from pelab.schedule import warmup_cosine
from pelab.trainer import make_trainer


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
    setup: Setup, pe: str, precision: str = "32-true", compile: bool = False
) -> list[float]:
    """pelab's run of ``pe`` at the setup's shape, as ``scripts/train.py`` trains it: its model
    (``pelab.assembly``), data and Trainer (``pelab.trainer.make_trainer``, with its configured
    callbacks), for ``setup.steps`` steps with no validation; timestamps every window."""
    cfg = pelab_config(
        *setup.overrides,
        f"pe={pe}",
        f"trainer.precision={precision}",
        f"model.compile={compile}",
        f"trainer.max_steps={setup.steps}",
        "+trainer.limit_val_batches=0",
        "trainer.enable_progress_bar=false",
        "learned_at=null",
    )
    model = build_model(cfg, setup.task)
    stamps = Stamps(setup.window)
    trainer = make_trainer(cfg, [], [stamps])
    trainer.fit(model, datamodule=data_module(cfg, setup.task))
    if compile and model.train_logits.failed:  # it fell back to eager: that is no measurement
        raise RuntimeError(f"torch.compile failed: {model.train_logits.failed}")
    return stamps.stamps


def tokens_per_second(stamps: list[float], window: int, tokens: int, warmup: int) -> list[float]:
    gaps = [b - a for a, b in zip(stamps[warmup:], stamps[warmup + 1 :], strict=False)]
    return [window * tokens / g for g in gaps]


def throughput(setup: Setup) -> dict[str, dict]:
    """Section 1: pelab against the minimal loop and x-transformers (and pelab's options)."""
    batches, steps, window = setup.batches, setup.steps, setup.window
    shape = {**setup.shape, "vocab": setup.vocab}
    results: dict[str, dict] = {}
    sides = {"none": ("pelab", "minimal"), "rope": ("pelab", "minimal", "x-transformers")}
    if not setup.quick:  # pelab's options, on the same RoPE run
        sides["rope"] += ("pelab bf16-mixed", "pelab compile")
    for pe, names in sides.items():
        speeds: dict[str, list[float]] = {name: [] for name in names}
        failed: dict[str, str] = {}
        for _ in range(setup.rounds):  # alternating sides: drifts of the machine hit them alike
            loops = {
                "pelab": lambda pe=pe: pelab_loop(setup, pe),
                "minimal": lambda pe=pe: minimal_loop(batches, shape, pe == "rope", steps, window),
                "x-transformers": lambda: xtransformers_loop(batches, shape, steps, window),
                "pelab bf16-mixed": lambda pe=pe: pelab_loop(setup, pe, precision="bf16-mixed"),
                "pelab compile": lambda pe=pe: pelab_loop(setup, pe, compile=True),
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
                    speeds[name] += tokens_per_second(stamps, window, setup.tokens, setup.warmup)
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


REQUIRED = ("pelab", "minimal")  # the comparison itself; the other sides are optional


def section(args, setup: Setup) -> dict:
    """``results``: per encoding (none, rope), each side's tokens/s and pelab's ratios."""
    return {"results": throughput(setup)}
