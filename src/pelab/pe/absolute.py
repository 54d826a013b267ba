"""Absolute encodings: a position vector joined to each token embedding."""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
from torch import Tensor, nn

from pelab.errors import ConfigError, not_a_choice
from pelab.pe.base import ModelDims, PositionalEncoding, register_pe
from pelab.positions import Positions

SinusoidLayout = Literal["interleaved", "concat"]
TokenScale = Literal["none", "sqrt_d_model"]  # pe.token_scale (AdditivePE)
Join = Literal["add", "concat"]  # pe.join (AdditivePE)


def sinusoid_table(
    pos: Tensor, dim: int, base: float = 10000.0, layout: SinusoidLayout = "interleaved"
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
    if layout not in get_args(SinusoidLayout):  # a function's argument: no constructor's
        raise not_a_choice("layout", layout, get_args(SinusoidLayout))
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float32, device=pos.device) / dim)
    angles = pos.float()[..., None] * inv_freq  # [..., dim/2]
    if layout == "interleaved":
        return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)
    return torch.cat((angles.sin(), angles.cos()), dim=-1)


class AdditivePE(PositionalEncoding):
    """An absolute encoding: a position vector ``p = position_vectors(pos)`` joined to each token
    embedding ``x``, after scaling the tokens by ``s`` (``token_scale``)::

        join=add:     x' = s x + p                        (Vaswani et al. 2017; today's default)
        join=concat:  x' = W [s x ; p],  W: [d_model, 2 d_model], learned

    ``token_scale``: ``none`` (``s = 1``) or ``sqrt_d_model`` (``s = sqrt(d_model)``, as
    Vaswani et al. and the DeepMind RPE code, whose token table starts at std 0.02; pelab's
    starts at std 1, so there the tokens drown the positions further). ``W [s x ; p] = W_x s x
    + W_p p``: concatenating then projecting adds a *learned linear map* of the position vector
    (and of the token), so a one-hot position (a table) gains nothing over ``add``, while a fixed
    sinusoid can be given its own subspace (docs/encodings.md, "Joining positions to tokens").
    ``W`` starts as ``N(0, 1 / (2 d_model))``, which keeps the joined vector's scale.
    """

    adds_to_tokens = True

    def __init__(
        self, dims: ModelDims, token_scale: TokenScale = "none", join: Join = "add"
    ) -> None:
        super().__init__(dims)
        self.token_scale, self.join = token_scale, join
        self.token_factor = math.sqrt(dims.d_model) if token_scale == "sqrt_d_model" else 1.0
        if join == "concat":
            self.joiner = nn.Linear(2 * dims.d_model, dims.d_model, bias=False)
            nn.init.normal_(self.joiner.weight, std=(2 * dims.d_model) ** -0.5)

    def position_vectors(self, pos: Positions) -> Tensor:
        """The position vectors ``[b|1, n, d_model]`` of the query positions ``pos.q``."""
        raise NotImplementedError

    def embed(self, x: Tensor, tokens: Tensor, pos: Positions) -> Tensor:
        p = self.position_vectors(pos).to(x.dtype)
        if self.join == "add":
            return self.token_factor * x + p
        return self.joiner(torch.cat((self.token_factor * x, p.expand_as(x)), dim=-1))


@register_pe("sinusoidal")
class SinusoidalPE(AdditivePE):
    """Fixed sinusoids added to the token embeddings (Vaswani et al. 2017); see ``sinusoid_table``.
    Defined for every position, so it runs at any length (whether the model generalises is the
    experiment). ``token_scale`` and ``join``: ``AdditivePE``."""

    shift = "absolute"

    def __init__(
        self,
        dims: ModelDims,
        base: float = 10000.0,
        layout: SinusoidLayout = "interleaved",
        token_scale: TokenScale = "none",
        join: Join = "add",
    ) -> None:
        super().__init__(dims, token_scale, join)
        if dims.d_model % 2:
            raise ConfigError(
                f"pe={self.pe_name} needs an even model.net.d_model, got {dims.d_model}; "
                f"use e.g. model.net.d_model={dims.d_model + 1}"
            )
        self.base, self.layout = base, layout

    def position_vectors(self, pos: Positions) -> Tensor:
        return sinusoid_table(pos.q, self.dims.d_model, self.base, self.layout)  # [b|1, n, d]


@register_pe("learned")
class LearnedPE(AdditivePE):
    """A trained table of position vectors (Gehring et al. 2017; BERT, Devlin et al. 2019).

    ``x_p += E[p]`` for ``p < max_len``. Rows of positions never seen in training keep their
    initial values, so the table does not extrapolate; positions ``>= max_len`` are an error.
    ``max_len=None`` sizes the table to the longest sequence of the run. ``token_scale`` and
    ``join``: ``AdditivePE`` (``join=concat`` is ``add`` reparametrised: ``W_p E[p]`` is a
    learned table too).
    """

    shift = "absolute"

    def __init__(
        self,
        dims: ModelDims,
        max_len: int | None = None,
        init_std: float = 1.0,
        token_scale: TokenScale = "none",
        join: Join = "add",
    ) -> None:
        super().__init__(dims, token_scale, join)
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

    def position_vectors(self, pos: Positions) -> Tensor:
        top = int(pos.q.max())
        if top >= self.table.num_embeddings:
            raise ConfigError(
                f"pe=learned has {self.table.num_embeddings} positions but got position {top}; "
                f"a learned table cannot extrapolate: raise pe.max_len"
            )
        return self.table(pos.q)

    def extra_repr(self) -> str:
        return f"max_len={self.table.num_embeddings}"
