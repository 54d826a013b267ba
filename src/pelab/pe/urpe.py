"""Universal RPE: attention probabilities scaled by a learned Toeplitz matrix, composed with a
relative bias."""

from __future__ import annotations

from functools import partial
from typing import Literal

import torch
from einops import rearrange
from torch import Tensor, nn

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims, PositionalEncoding, register_pe
from pelab.pe.bias import T5BiasPE
from pelab.pe.composed import ComposedPE
from pelab.pe.shaw import clipped_offset_index
from pelab.positions import Positions

UrpeBias = Literal["none", "t5"]  # pe.bias


class ToeplitzScaling(PositionalEncoding):
    """URPE's ``C``: the attention probabilities times a learned Toeplitz matrix, ``probs ⊙ C``
    with ``C_ij = c_{i-j}``, not renormalised (see ``UniversalRelativePE``).

    ``c: [n_layers, n_heads, rows]`` holds one entry per offset up to ``max_len - 1`` (keys before
    the query; in an encoder also after it), initialised to ones. Larger offsets reuse the last
    entry of their direction, so any length runs.
    """

    shift = "relative"

    def __init__(self, dims: ModelDims, max_len: int) -> None:
        super().__init__(dims)
        if max_len < 1:
            raise ConfigError(
                f"pe.max_len must be >= 1 (or null: the run's longest), got {max_len}"
            )
        self.behind = max_len - 1
        self.ahead = 0 if dims.causal else self.behind
        rows = self.behind + self.ahead + 1
        self.c = nn.Parameter(torch.ones(dims.n_layers, dims.n_heads, rows))

    def modify_probs(self, probs: Tensor, pos: Positions, layer: int) -> Tensor:
        index = pos.memo(
            (id(self), "rows"), lambda: clipped_offset_index(pos, self.behind, self.ahead)
        )  # [b|1, i, j]
        toeplitz = rearrange(self.c[layer][:, index], "h b i j -> b h i j")
        return probs * toeplitz

    def extra_repr(self) -> str:
        return f"rows={self.c.shape[-1]}"


@register_pe("urpe")
class UniversalRelativePE(ComposedPE):
    """URPE (Luo, Li, Zheng, Liu, Wang, He 2022, "Your Transformer May Not be as Powerful as You
    Expect"), section 4, eq. 8::

        Attn(X) = (softmax(Q K^T / sqrt(d) + B) ⊙ C) V,    C_ij = c_{i-j}

    A softmax row always sums to one, which the paper shows keeps relative-bias Transformers from
    being universal approximators; the learnable Toeplitz ``C`` lifts that restriction. ``C`` is
    not renormalised (as in the paper), so rows of ``A = softmax(.) ⊙ C`` need not sum to one.

    The composition (``ComposedPE``) of the relative bias ``B`` and the scaling ``C``
    (``ToeplitzScaling``, part ``toeplitz``; ``B`` is part ``bias``). Choices:

    - ``c`` is learned per layer and per head, one entry per offset: ``[n_layers, n_heads,
      rows]``, initialised to ones so that the model starts as its base relative model (the
      authors' ``--constant-init-ur-attn``). The authors' released synthetic-task code instead
      builds one ``C`` shared by all layers.
    - Offsets up to ``max_len - 1`` have their own entry: the encoder learns ``2 max_len - 1``
      of them (keys before and after the query), the decoder ``max_len`` (the causal mask zeroes
      every probability of a later key, so their entries would be dead). Larger offsets reuse the
      last entry, so any length runs. ``max_len=None`` sizes the table to the longest sequence of
      the run; re-evaluating a checkpoint keeps the training size (``pelab.evaluate``). Entries of
      offsets never seen in training keep ``c = 1``.
    - ``B`` is the relative bias URPE is built on (the paper pairs it with T5-style RPE).
      ``bias="t5"`` (default) is exactly ``pe=t5_bias`` (learned per head and bucket, shared by
      all layers, zero-initialised; ``num_buckets`` and ``max_distance`` are its settings), so
      ``urpe`` vs ``t5_bias`` isolates ``C``. ``bias="none"`` uses ``C`` alone.
    """

    position_dims = 1
    shift = "relative"

    def __init__(
        self,
        dims: ModelDims,
        bias: UrpeBias = "t5",
        num_buckets: int = 32,
        max_distance: int = 128,
        max_len: int | None = None,
    ) -> None:
        max_len = dims.max_len if max_len is None else max_len
        # C first: pe=urpe's parameter order (runs keep their numbers)
        parts = {"toeplitz": partial(ToeplitzScaling, max_len=max_len)}
        if bias == "t5":
            parts["bias"] = partial(T5BiasPE, num_buckets=num_buckets, max_distance=max_distance)
        super().__init__(dims, parts)
