"""Absolute encodings: a position vector added to each token embedding."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims, PositionalEncoding, register_pe
from pelab.positions import Positions

SINUSOID_LAYOUTS = ("interleaved", "concat")


def sinusoid_table(
    pos: Tensor, dim: int, base: float = 10000.0, layout: str = "interleaved"
) -> Tensor:
    """Vaswani et al. 2017, "Attention Is All You Need", section 3.5.

    ``PE(p, 2i) = sin(p / base^(2i/dim))`` and ``PE(p, 2i+1) = cos(p / base^(2i/dim))``.
    ``layout="interleaved"`` puts sin and cos of one frequency side by side (the paper);
    ``layout="concat"`` puts the ``dim/2`` sines first, then the ``dim/2`` cosines, with the same
    frequencies ``base^(-2i/dim)`` (as Transformer-XL's code). tensor2tensor and fairseq also
    concatenate, but space their frequencies as ``base^(-i/(dim/2 - 1))`` (the lowest exactly
    ``1/base``), so their numbers differ slightly from ``concat``'s. ``pos: [...]`` ->
    ``[..., dim]`` in float32.
    """
    if dim % 2:
        raise ConfigError(f"sinusoidal encoding needs an even dimension, got {dim}")
    if layout not in SINUSOID_LAYOUTS:
        raise ConfigError(f"unknown sinusoid layout {layout!r}; valid choices: {SINUSOID_LAYOUTS}")
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float32, device=pos.device) / dim)
    angles = pos.float()[..., None] * inv_freq  # [..., dim/2]
    if layout == "interleaved":
        return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)
    return torch.cat((angles.sin(), angles.cos()), dim=-1)


@register_pe("sinusoidal")
class SinusoidalPE(PositionalEncoding):
    """Fixed sinusoids added to the token embeddings (Vaswani et al. 2017); see ``sinusoid_table``.
    Defined for every position, so it runs at any length (whether the model generalises is the
    experiment)."""

    shift = "absolute"

    def __init__(
        self, dims: ModelDims, base: float = 10000.0, layout: str = "interleaved"
    ) -> None:
        super().__init__(dims)
        if dims.d_model % 2:
            raise ConfigError(
                f"pe={self.pe_name} needs an even model.net.d_model, got {dims.d_model}; "
                f"use e.g. model.net.d_model={dims.d_model + 1}"
            )
        sinusoid_table(torch.zeros(1), dims.d_model, base, layout)  # validate layout early
        self.base, self.layout = base, layout

    def table(self, pos: Positions) -> Tensor:
        return sinusoid_table(pos.q, self.dims.d_model, self.base, self.layout)  # [b|1, n, d]

    def embed(self, x: Tensor, tokens: Tensor, pos: Positions) -> Tensor:
        return x + self.table(pos).to(x.dtype)


@register_pe("learned")
class LearnedPE(PositionalEncoding):
    """A trained table of position vectors (Gehring et al. 2017; BERT, Devlin et al. 2019).

    ``x_p += E[p]`` for ``p < max_len``. Rows of positions never seen in training keep their
    initial values, so the table does not extrapolate; positions ``>= max_len`` are an error.
    ``max_len=None`` sizes the table to the longest sequence of the run.
    """

    shift = "absolute"

    def __init__(self, dims: ModelDims, max_len: int | None = None, init_std: float = 1.0) -> None:
        super().__init__(dims)
        max_len = dims.max_len if max_len is None else max_len
        if max_len < dims.max_len:
            raise ConfigError(
                f"pe=learned has a table of {max_len} positions but this run feeds sequences "
                f"of up to {dims.max_len} tokens (its longest task.eval_lengths). A learned "
                f"table cannot extrapolate beyond its size: raise pe.max_len to at least "
                f"{dims.max_len} (or leave it null), or shorten task.eval_lengths."
            )
        self.table = nn.Embedding(max_len, dims.d_model)
        nn.init.normal_(self.table.weight, std=init_std)

    def embed(self, x: Tensor, tokens: Tensor, pos: Positions) -> Tensor:
        top = int(pos.q.max())
        if top >= self.table.num_embeddings:
            raise ConfigError(
                f"pe=learned has {self.table.num_embeddings} positions but got position {top}; "
                f"a learned table cannot extrapolate: raise pe.max_len"
            )
        return x + self.table(pos.q)

    def extra_repr(self) -> str:
        return f"max_len={self.table.num_embeddings}"
