"""What an encoding computes, as the figures ``scripts/inspect_pe.py`` draws
(``pelab.inspect.inspect_pe`` names them): the position vectors ``embed`` gives, the per-block
signal of an encoding injected at every block, what each attention hook adds as a function of
the distance (``relative_curves``) or of a 2-D offset (``grid_relative``), and ``draw``, which
saves every figure that applies to an encoding."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from pelab.inspect.pe_figures import (
    HOOK_TITLES,
    plot_cosine,
    plot_heatmaps,
    plot_linear_map,
    plot_relative,
    plot_tables,
)
from pelab.pe.absolute import AdditivePE, SinusoidalPE
from pelab.pe.base import PositionalEncoding
from pelab.pe.layered import LayeredPE
from pelab.pe.scaled_sinusoidal import ScaledSinusoidalPE
from pelab.positions import Positions

# where an encoding is drawn: the host (built untrained here, or loaded by ``load_run`` onto the
# CPU), from seeded CPU generators
HOST = "cpu"


def position_vectors(pe: PositionalEncoding, n: int) -> tuple[Tensor, str]:
    """``embed`` of one token vector at positions ``0..n-1``: ``[n, d_model]``, and what it fed.

    Zeros for an ``AdditivePE`` (the output is what positions contribute: ``P``, or ``W_p P``
    with ``join=concat``) and wherever ``embed(x) = x + P(pos)`` (checked on a random ``x``);
    otherwise ``embed`` transforms the token vector (complex_order rotates it), zeros would stay
    zero, and it gets one seeded random vector as token 0. The tokens are token 0, or, for an
    encoding that indexes digits (abacus), the first digit token: one number of ``n`` digits.
    """
    token = pe.dims.digit_tokens[0] if pe.needs_digit_tokens else 0
    tokens, pos = torch.full((1, n), token, device=HOST), Positions.contiguous(n, HOST)
    generator = torch.Generator().manual_seed(0)
    vector = torch.randn(pe.dims.d_model, generator=generator, device=HOST).expand(1, n, -1)
    zeros = torch.zeros_like(vector)
    added, moved = pe.embed(zeros, tokens, pos), pe.embed(vector, tokens, pos)
    if isinstance(pe, AdditivePE) or torch.allclose(moved - vector, added, atol=1e-5):
        return added[0], "zero token vectors" + (" of one number" if pe.needs_digit_tokens else "")
    return moved[0], "one random vector as token 0"


def layer_signals(pe: PositionalEncoding, n: int) -> Tensor:
    """``layer_input`` of a zero residual stream at positions ``0..n-1`` entering each block:
    ``[n_layers, n, d_model]``, what an encoding injected at every block adds there."""
    x, pos = torch.zeros(1, n, pe.dims.d_model, device=HOST), Positions.contiguous(n, HOST)
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
    pos = Positions.contiguous(n, HOST)
    generator = torch.Generator().manual_seed(0)
    qk = torch.randn(2, 1, dims.n_heads, 1, dims.head_dim, generator=generator, device=HOST)
    q, k = (x.expand(1, dims.n_heads, n, dims.head_dim) for x in qk)  # one vector everywhere
    scale = dims.head_dim**-0.5
    if hook in ("logit_bias", "input_bias"):
        x = torch.randn(1, n, dims.d_model, generator=generator, device=HOST)
        if hook == "logit_bias":
            bias = pe.logit_bias(pos, layer)
        else:
            bias = pe.input_bias(x, q, k, pos, layer)
        if bias is None:  # a hook these options leave unused (grape_a: one of its two)
            return None
        response = bias.expand(1, dims.n_heads, n, n)
    elif hook == "normalize":
        equal = torch.zeros(1, dims.n_heads, n, n, device=HOST)
        if dims.causal:
            equal = equal.masked_fill(
                ~torch.ones(n, n, dtype=torch.bool, device=HOST).tril(), -torch.inf
            )
        response = pe.normalize(equal, pos, layer)
    elif hook == "transform_qk":
        q, k = pe.transform_qk(q, k, pos, layer)
        response = q @ k.transpose(-1, -2) * scale
    elif hook == "modify_logits":
        logits = q @ q.transpose(-1, -2) * scale  # q = k: one random vector as query and key
        response = pe.modify_logits(logits, q, q, pos, layer) - logits
    else:  # modify_probs
        uniform = torch.full((1, dims.n_heads, n, n), 1.0 / n, device=HOST)
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
    x, tokens = (
        torch.zeros(1, len(cells), pe.dims.d_model, device=HOST),
        torch.zeros(1, len(cells), dtype=torch.long, device=HOST),
    )
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
        q, k = torch.randn(2, 1, dims.n_heads, 1, dims.head_dim, generator=generator, device=HOST)
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
