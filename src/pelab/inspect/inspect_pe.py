"""Draw a positional encoding: ``python scripts/inspect_pe.py pe=<name> [model=encoder]
[model.net.d_model=128] [length=32] [out_dir=...] [wandb=true]`` (``configs/inspect.yaml``).

The encoding is built exactly as training builds it (``configs/inspect.yaml`` is
``configs/train.yaml`` plus ``length``, ``out_dir`` and ``wandb``, then
``pelab.assembly.build_model``), untrained, and each figure that applies to it is saved as a PNG in
``out_dir`` (default ``logs/inspect/<pe>/``; with ``ckpt_path``, ``<run dir>/inspect/``):

- ``absolute.png``: ``embed`` at positions ``0..length-1`` (positions x dims), for encodings
  that act on the embeddings: of zero token vectors where ``embed`` adds a vector per position,
  else (it transforms the token vector, as complex_order does) of one random token vector; an
  encoding that indexes digits (abacus) is fed one number of ``length`` digits (places 1..);
- ``cosine.png``: cosine similarity of those position vectors, as a matrix and against distance;
- ``layer_input.png``: for encodings injected at every block (FLOATER), ``layer_input`` of a zero
  residual stream per block (positions x dims), and its change from position 0;
- ``relative_<hook>.png``: what the attention hooks add as a function of the distance ``i - j``,
  one curve per head, in the first layer that runs the encoding (0, or a ``pe.layers``
  schedule's first: its title says so): the content-free ``logit_bias``; for ``transform_qk``
  (RoPE, xPos) the score ``q . k / sqrt(d)`` of one fixed random pair placed at every offset; for
  ``modify_logits`` the change of the logits when every position carries the same random
  ``q = k``; for ``modify_probs`` the factor by which uniform probabilities change;
- ``linear_map.png`` (sinusoids): the least-squares fit ``PE(pos + k) ~ PE(pos) M_k`` over many
  positions, whose residual is ~0 because a shift is a rotation of each sin/cos pair (Vaswani
  et al. 2017, section 3.5), and ``M_k`` itself.

Encodings of 2-D positions (``pe=rope_2d task=grid``, ...) get heatmaps instead, over offsets
``(Δrow, Δcol)`` in ``[-length/2, length/2]²``, one panel per head where there are heads:

- ``grid_cosine.png``: cosine similarity of ``embed`` of a zero vector at ``(row, col)`` to the
  same at the centre, for encodings that act on the embeddings;
- ``grid_relative_<hook>.png``: the ``logit_bias``, or the ``transform_qk`` score of one fixed
  random q, k pair, as a function of the offset ``(Δrow, Δcol)`` (query minus key).

With ``ckpt_path=<run dir>/checkpoints/best.ckpt`` the figures are those of the trained
encoding of that run (learned tables, biases and per-layer parameters as trained; the model and
its settings come from the run's record, as ``pelab.load_run`` loads it), and two more:

- ``attention_len<n>.png``: every attention module's probabilities on one test sample
  (teacher-forced), one panel per layer and head, at the longest in-distribution evaluation
  length and the longest one beyond it: where the model looks when it extrapolates. A colour
  bar gives the probability; dashed red lines mark the longest training sequence. Recorded by
  ``pelab.models.attention_maps`` on either kernel.

A trained run's figures go to ``<run dir>/inspect/`` (``pelab.inspect.inspect_dir``), beside
its checkpoints, so the figures of two checkpoints never overwrite each other.

An untrained encoding whose learned parameters start constant (T5's zero bias table, CoPE's
zero position vectors, URPE's unit Toeplitz factors) draws flat curves: the console and the flat
figure's title say so, and ``<figure>_illustrative.png`` beside it draws the encoding with
illustrative values, titled "illustrative, not trained" (``pelab.inspect.untrained``).

With ``wandb=true`` the figures are logged as one W&B run too (``job_type=inspect``, in the
project and mode of ``logger=wandb``); by default only training and re-evaluation make W&B runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from torch import Tensor

from pelab.assembly import build_model, build_task
from pelab.errors import ConfigError
from pelab.inspect.pe_figures import (
    HOOK_TITLES,
    plot_attention,
    plot_cosine,
    plot_heatmaps,
    plot_linear_map,
    plot_relative,
    plot_tables,
)
from pelab.inspect.untrained import constant_parameters, illustrated, is_flat
from pelab.load import Run, load_run
from pelab.models.attention_maps import attention_maps
from pelab.pe.absolute import AdditivePE, SinusoidalPE
from pelab.pe.base import PositionalEncoding
from pelab.pe.layered import LayeredPE
from pelab.pe.scaled_sinusoidal import ScaledSinusoidalPE
from pelab.positions import Positions
from pelab.threads import check_threads, configure_threads


def position_vectors(pe: PositionalEncoding, n: int) -> tuple[Tensor, str]:
    """``embed`` of one token vector at positions ``0..n-1``: ``[n, d_model]``, and what it fed.

    Zeros for an ``AdditivePE`` (the output is what positions contribute: ``P``, or ``W_p P``
    with ``join=concat``) and wherever ``embed(x) = x + P(pos)`` (checked on a random ``x``);
    otherwise ``embed`` transforms the token vector (complex_order rotates it), zeros would stay
    zero, and it gets one seeded random vector as token 0. The tokens are token 0, or, for an
    encoding that indexes digits (abacus), the first digit token: one number of ``n`` digits.
    """
    token = pe.dims.digit_tokens[0] if pe.needs_digit_tokens else 0
    tokens, pos = torch.full((1, n), token), Positions.contiguous(n)
    generator = torch.Generator().manual_seed(0)
    vector = torch.randn(pe.dims.d_model, generator=generator).expand(1, n, -1)
    zeros = torch.zeros_like(vector)
    added, moved = pe.embed(zeros, tokens, pos), pe.embed(vector, tokens, pos)
    if isinstance(pe, AdditivePE) or torch.allclose(moved - vector, added, atol=1e-5):
        return added[0], "zero token vectors" + (" of one number" if pe.needs_digit_tokens else "")
    return moved[0], "one random vector as token 0"


def layer_signals(pe: PositionalEncoding, n: int) -> Tensor:
    """``layer_input`` of a zero residual stream at positions ``0..n-1`` entering each block:
    ``[n_layers, n, d_model]``, what an encoding injected at every block adds there."""
    x, pos = torch.zeros(1, n, pe.dims.d_model), Positions.contiguous(n)
    return torch.stack([pe.layer_input(x, pos, layer)[0] for layer in range(pe.dims.n_layers)])


def drawn_layer(pe: PositionalEncoding) -> int:
    """The layer the hook figures show: 0, or with a layer schedule (``pe.layers``) the first
    layer that runs the encoding."""
    return pe.active.index(True) if isinstance(pe, LayeredPE) and True in pe.active else 0


def schedule_note(pe: PositionalEncoding) -> str:
    """The hook figures' line on a layer schedule (empty without one): which layer is drawn,
    and which layers add nothing."""
    if not isinstance(pe, LayeredPE):
        return ""
    schedule = ",".join(pe.pe_name if on else "none" for on in pe.active)
    without = [str(layer) for layer, on in enumerate(pe.active) if not on]
    return (
        f"pe.layers=[{schedule}]: layer {drawn_layer(pe)} drawn; layers "
        f"{', '.join(without)} run no encoding"
    )


def relative_curves(
    pe: PositionalEncoding, hook: str, length: int
) -> tuple[Tensor, Tensor] | None:
    """Distances ``c - j`` and the hook's per-head response ``[h, n]`` at query ``c`` (None: a
    bias hook the encoding overrides but answers None with its options).

    Positions ``0..n-1`` with ``c = length - 1``; an encoder also sees ``length - 1`` keys after
    the query (negative distances), a decoder only the past and present.
    """
    dims, layer = pe.dims, drawn_layer(pe)
    n = length if dims.causal else 2 * length - 1
    c = length - 1
    pos = Positions.contiguous(n)
    generator = torch.Generator().manual_seed(0)
    qk = torch.randn(2, 1, dims.n_heads, 1, dims.head_dim, generator=generator)
    q, k = (x.expand(1, dims.n_heads, n, dims.head_dim) for x in qk)  # one vector everywhere
    scale = dims.head_dim**-0.5
    if hook in ("logit_bias", "input_bias"):
        x = torch.randn(1, n, dims.d_model, generator=generator)
        if hook == "logit_bias":
            bias = pe.logit_bias(pos, layer)
        else:
            bias = pe.input_bias(x, q, k, pos, layer)
        if bias is None:  # a hook these options leave unused (grape_a: one of its two)
            return None
        response = bias.expand(1, dims.n_heads, n, n)
    elif hook == "normalize":
        equal = torch.zeros(1, dims.n_heads, n, n)
        if dims.causal:
            equal = equal.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), -torch.inf)
        response = pe.normalize(equal, pos, layer)
    elif hook == "transform_qk":
        q, k = pe.transform_qk(q, k, pos, layer)
        response = q @ k.transpose(-1, -2) * scale
    elif hook == "modify_logits":
        logits = q @ q.transpose(-1, -2) * scale  # q = k: one random vector as query and key
        response = pe.modify_logits(logits, q, q, pos, layer) - logits
    else:  # modify_probs
        uniform = torch.full((1, dims.n_heads, n, n), 1.0 / n)
        response = pe.modify_probs(uniform, pos, layer) / uniform
    return c - torch.arange(n), response[0, :, c]


def grid_cells(radius: int) -> Tensor:
    """``[(2R+1)², 2]``: every (row, col) offset with both coordinates in ``[-R, R]``, row by
    row."""
    axis = torch.arange(-radius, radius + 1)
    return torch.cartesian_prod(axis, axis)


def grid_cosine(pe: PositionalEncoding, radius: int) -> Tensor:
    """``[2R+1, 2R+1]``: cos(PE(row, col), PE(R, R)) for an encoding of 2-D positions."""
    cells = grid_cells(radius) + radius  # [m, 2], coordinates 0..2R
    x, tokens = torch.zeros(1, len(cells), pe.dims.d_model), torch.zeros(1, len(cells)).long()
    table = pe.embed(x, tokens, Positions.from_tensor(cells[None]))
    unit = torch.nn.functional.normalize(table[0], dim=-1)
    centre = len(cells) // 2
    return (unit @ unit[centre]).unflatten(0, (2 * radius + 1, 2 * radius + 1))


def grid_relative(pe: PositionalEncoding, hook: str, radius: int) -> Tensor:
    """``[h, 2R+1, 2R+1]``: the hook's response of a query at ``(R, R)`` to keys at every offset
    ``(Δrow, Δcol) = query - key`` in ``[-R, R]²`` (the same random q, k pair everywhere for
    ``transform_qk``)."""
    dims, layer = pe.dims, drawn_layer(pe)
    query = torch.tensor([[[radius, radius]]])  # [1, 1, 2]
    keys = query - grid_cells(radius)[None]  # [1, m, 2]
    pos, m = Positions(query, keys), keys.shape[1]
    if hook == "logit_bias":
        response = pe.logit_bias(pos, layer).expand(1, dims.n_heads, 1, m)
    else:  # transform_qk
        generator = torch.Generator().manual_seed(0)
        q, k = torch.randn(2, 1, dims.n_heads, 1, dims.head_dim, generator=generator)
        q, k = pe.transform_qk(q, k.expand(1, dims.n_heads, m, dims.head_dim), pos, layer)
        response = q @ k.transpose(-1, -2) * dims.head_dim**-0.5
    return response[0, :, 0].unflatten(-1, (2 * radius + 1, 2 * radius + 1))


GRID_HOOKS = ("logit_bias", "transform_qk")  # the hooks drawn over 2-D offsets


@dataclass(frozen=True)
class HookFigure:
    """What one attention hook adds, as drawn: per-head curves over the distance (1-D
    positions, ``distance``) or per-head heatmaps over the offset (2-D, ``radius``)."""

    hook: str
    values: Tensor  # [h, n] curves, or [h, 2R+1, 2R+1] heatmaps
    distance: Tensor | None = None
    radius: int = 0

    @property
    def name(self) -> str:
        return (
            f"relative_{self.hook}" if self.distance is not None else f"grid_relative_{self.hook}"
        )

    def plot(self, path: Path, note: str = "") -> None:
        if self.distance is not None:
            plot_relative(self.distance, self.values, self.hook, path, note)
        else:
            title = f"{HOOK_TITLES[self.hook][0]} vs (Δrow, Δcol) = query - key"
            plot_heatmaps(self.values, self.radius, title, path, note)


def hook_figures(pe: PositionalEncoding, length: int) -> list[HookFigure]:
    """The figure of every attention hook ``pe`` overrides: over distances up to ``length``, or
    for 2-D positions over offsets in ``[-length/2, length/2]²``."""
    if pe.position_dims == 2:
        radius = length // 2
        return [
            HookFigure(hook, grid_relative(pe, hook, radius), radius=radius)
            for hook in GRID_HOOKS
            if pe.overrides(hook)
        ]
    figures = []
    for hook in HOOK_TITLES:
        if pe.overrides(hook) and (curves := relative_curves(pe, hook, length)) is not None:
            figures.append(HookFigure(hook, curves[1], curves[0]))
    return figures


def draw(
    pe: PositionalEncoding, out_dir: Path, length: int, notes: Mapping[str, str] = {}
) -> list[Path]:
    """Every figure that applies to ``pe``; returns the PNG paths. ``notes``: a line for the
    title of a hook's figure, by figure name."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    n = min(length, pe.dims.max_len)
    if pe.overrides("embed") and pe.position_dims == 2:
        path = out_dir / "grid_cosine.png"
        title = "cos(PE(row, col), PE(centre)); axes: offset from the centre"
        plot_heatmaps(grid_cosine(pe, length // 2)[None], length // 2, title, path)
        paths.append(path)
    elif pe.overrides("embed"):
        table, fed = position_vectors(pe, n)
        plot_tables([(table, f"position vectors (embed of {fed})")], out_dir / "absolute.png")
        plot_cosine(table, out_dir / "cosine.png")
        paths += [out_dir / "absolute.png", out_dir / "cosine.png"]
    if pe.overrides("layer_input"):
        panels = []
        for layer, signal in enumerate(layer_signals(pe, n)):
            panels.append((signal, f"block {layer}: layer_input of a zero stream"))
            panels.append((signal - signal[0], f"block {layer}: minus its value at position 0"))
        plot_tables(panels, out_dir / "layer_input.png", columns=2)
        paths.append(out_dir / "layer_input.png")
    schedule = schedule_note(pe)
    for figure in hook_figures(pe, length):
        path = out_dir / f"{figure.name}.png"
        note = "; ".join(n for n in (notes.get(figure.name, ""), schedule) if n)
        figure.plot(path, note)
        paths.append(path)
    if isinstance(pe, (SinusoidalPE, ScaledSinusoidalPE)):
        # many more positions than dims (4 d + 64), so that the fit is not underdetermined
        table = position_vectors(pe, 4 * pe.dims.d_model + 64)[0]
        plot_linear_map(table, out_dir / "linear_map.png")
        paths.append(out_dir / "linear_map.png")
    return paths


def flat_at_start(pe: PositionalEncoding, length: int) -> dict[str, list[str]]:
    """The hook figures of an untrained ``pe`` that are flat because learned parameters start
    constant, by figure name, each with those parameters: the ones whose illustrative values
    (``pelab.inspect.untrained``) make it vary. Empty for an encoding that draws no flat figure."""
    flat = {figure.name for figure in hook_figures(pe, length) if is_flat(figure.values)}
    causes: dict[str, list[str]] = {}
    for name in constant_parameters(pe) if flat else {}:
        for figure in hook_figures(illustrated(pe, [name])[0], length):
            if figure.name in flat and not is_flat(figure.values):
                causes.setdefault(figure.name, []).append(name)
    return causes


def starts(pe: PositionalEncoding, parameters: list[str]) -> str:
    """``parameters`` of ``pe`` and the one value each starts at: ``bias.weight = 0``."""
    values = constant_parameters(pe)
    return ", ".join(f"{name} = {values[name]:g}" for name in parameters)


def untrained_notice(pe: PositionalEncoding, causes: dict[str, list[str]], values: str) -> str:
    """The console's line on the flat figures ``causes`` (``flat_at_start``) of an untrained
    ``pe`` and their illustrations, which hold ``values``."""
    figures = ", ".join(causes)
    parameters = sorted({p for parameters in causes.values() for p in parameters})
    shown = ", ".join(f"{figure}_illustrative.png" for figure in causes)
    return (
        f"note: pe={pe.pe_name} is untrained and {starts(pe, parameters)} everywhere, so "
        f"{figures} {'is' if len(causes) == 1 else 'are'} flat: the encoding adds nothing there "
        f"until trained. Drawn with illustrative values, not trained, in {shown}: {values}. "
        "A trained run's encoding: inspect_pe.py "
        "ckpt_path=<run dir>/checkpoints/best.ckpt"
    )


def draw_untrained(pe: PositionalEncoding, out_dir: Path, length: int) -> list[Path]:
    """``draw`` for an untrained encoding: a figure left flat by parameters that start constant
    says so in its title and in the console, and ``<figure>_illustrative.png`` beside it draws
    the encoding with illustrative values of those parameters, titled as such."""
    causes = flat_at_start(pe, length)
    notes = {
        figure: f"flat: untrained, {starts(pe, parameters)} everywhere "
        f"(see {figure}_illustrative.png)"
        for figure, parameters in causes.items()
    }
    paths = draw(pe, out_dir, length, notes)
    if not causes:
        return paths
    shown, values = illustrated(pe, {p for parameters in causes.values() for p in parameters})
    note = f"ILLUSTRATIVE, NOT TRAINED: {values}"
    for figure in hook_figures(shown, length):
        if figure.name in causes:
            path = out_dir / f"{figure.name}_illustrative.png"
            figure.plot(path, note)
            paths.append(path)
    print(untrained_notice(pe, causes, values))
    return paths


def check_options(cfg: DictConfig) -> None:
    """``length`` a positive integer, ``wandb`` a boolean (true only with a W&B logger),
    ``threads`` auto or a positive integer, else a ``ConfigError``."""
    if isinstance(cfg.length, bool) or not isinstance(cfg.length, int) or cfg.length < 1:
        raise ConfigError(f"length={cfg.length!r}: expected a positive integer (positions drawn)")
    if not isinstance(cfg.wandb, bool):
        raise ConfigError(f"wandb={cfg.wandb!r}: valid choices: true, false")
    if cfg.wandb and OmegaConf.select(cfg, "logger.wandb") is None:
        raise ConfigError(
            "wandb=true logs the figures to W&B, but the logger is not W&B (logger=none or "
            "csv): drop wandb=true, or use logger=wandb"
        )
    check_threads(cfg.get("threads", "auto"))


def log_to_wandb(
    paths: list[Path], pe_name: str, out_dir: Path, config: dict, logger: DictConfig
) -> None:
    """One W&B run (``job_type=inspect``, in the project and mode of the W&B ``logger``
    section) with every figure as an image ``inspect/<name>``."""
    import wandb

    run = wandb.init(
        project=logger.project,
        job_type="inspect",
        name=f"inspect-{pe_name}",
        dir=str(out_dir),
        mode=logger.mode,
        config=config,
    )
    run.log({f"inspect/{path.stem}": wandb.Image(str(path)) for path in paths})
    run.finish()


def attention_figures(trained: Run, out_dir: Path) -> list[Path]:
    """``attention_len<n>.png`` of a trained model: every attention module's probabilities on
    one test sample (teacher-forced: the prompt, then the right answer) at the longest
    in-distribution evaluation length and at the longest length beyond it, if any."""
    task, model = trained.task, trained.model
    trained_len = model.net.pe.dims.train_max_len or task.max_train_sequence_length()
    inside = [n for n in task.eval_lengths if task.in_distribution(n)]
    outside = [n for n in task.eval_lengths if not task.in_distribution(n)]
    paths = []
    for length in [max(inside)] + ([max(outside)] if outside else []):
        prompt, answer = task.sample(1, length, torch.Generator().manual_seed(length))
        positions = model.sequence_positions(prompt, answer.shape[1])
        with torch.no_grad(), attention_maps(model.net) as maps:
            model.kind.answer_logits(model.net, prompt, answer, positions)
        first = {name: calls[0][0] for name, calls in maps.items()}  # [h, i, j] of sample 0
        split = "in distribution" if task.in_distribution(length) else "beyond training"
        path = out_dir / f"attention_len{length}.png"
        title = f"{trained.model.net.pe.pe_name} on {task.task_name}, length {length} ({split})"
        plot_attention(first, prompt.shape[1] + model.kind.markers, title, path, trained_len)
        paths.append(path)
    return paths


def run(cfg: DictConfig) -> list[Path]:
    """Build the encoding of ``cfg`` (``configs/inspect.yaml``), draw it into ``cfg.out_dir``,
    print and return the PNG paths; log them to W&B if ``cfg.wandb``. Untrained, a figure left
    flat by parameters that start constant is said so and illustrated (``draw_untrained``).
    With ``ckpt_path`` the encoding and model are the trained ones of that checkpoint's run
    (``pelab.load_run``), and the attention maps are drawn too (``attention_figures``)."""
    check_options(cfg)
    out_dir = Path(cfg.out_dir)
    threads = cfg.get("threads", "auto")
    if cfg.get("ckpt_path"):
        given = Path(cfg.ckpt_path)  # a checkpoint, or a run directory (its best.ckpt)
        if not given.exists():
            raise ConfigError(
                f"ckpt_path={given} does not exist: give a run directory or "
                "<run dir>/checkpoints/best.ckpt"
            )
        if given.is_dir():
            trained = load_run(given, threads=threads)
        else:
            trained = load_run(given.resolve().parent.parent, str(given), threads=threads)
        model = trained.model
    else:
        trained, model = None, build_model(cfg, build_task(cfg))
        configure_threads(cfg, model.net.num_params()["total"])
    pe = model.net.pe.eval()  # as evaluation computes it (no training draws: abacus's offset)
    with torch.no_grad():
        if trained is None:
            paths = draw_untrained(pe, out_dir, cfg.length)
        else:
            paths = draw(pe, out_dir, cfg.length) + attention_figures(trained, out_dir)
    for path in paths:
        print(path)
    if cfg.wandb:
        overrides = list(HydraConfig.get().overrides.task)
        config = {"pe": pe.pe_name, "overrides": overrides, "dims": asdict(pe.dims)}
        log_to_wandb(paths, pe.pe_name, out_dir, config, cfg.logger.wandb)
    return paths
