"""Universal RPE: attention probabilities scaled by a learned Toeplitz matrix."""

from __future__ import annotations

import torch
from einops import rearrange
from torch import Tensor, nn

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims, PositionalEncoding, register_pe
from pelab.pe.bias import T5BiasPE
from pelab.pe.shaw import clipped_offset_index
from pelab.positions import Positions

URPE_BIASES = ("none", "t5")


@register_pe("urpe")
class UniversalRelativePE(PositionalEncoding):
    """URPE (Luo, Li, Zheng, Liu, Wang, He 2022, "Your Transformer May Not be as Powerful as You
    Expect"), section 4, eq. 8::

        Attn(X) = (softmax(Q K^T / sqrt(d) + B) ⊙ C) V,    C_ij = c_{i-j}

    A softmax row always sums to one, which the paper shows keeps relative-bias Transformers from
    being universal approximators; the learnable Toeplitz ``C`` lifts that restriction. ``C`` is
    not renormalised (as in the paper), so rows of ``A = softmax(.) ⊙ C`` need not sum to one.

    Choices:

    - ``c`` is learned per layer and per head, one entry per offset: ``toeplitz`` is
      ``[n_layers, n_heads, rows]``, initialised to ones so that the model starts as its base
      relative model (the authors' ``--constant-init-ur-attn``). The authors' released
      synthetic-task code instead builds one ``C`` shared by all layers.
    - Offsets up to ``max_len - 1`` have their own entry: the encoder learns ``2 max_len - 1``
      of them (keys before and after the query), the decoder ``max_len`` (the causal mask zeroes
      every probability of a later key, so their entries would be dead). Larger offsets reuse the
      last entry, so any length runs. ``max_len=None`` sizes the table to the longest sequence of
      the run; re-evaluating a checkpoint keeps the training size (``pelab.evaluate``). Entries of
      offsets never seen in training keep ``c = 1``.
    - ``B`` is the relative bias URPE is built on (the paper pairs it with T5-style RPE).
      ``bias="t5"`` (default) is exactly ``pe=t5_bias``'s bias (learned per head and bucket,
      shared by all layers, zero-initialised; ``num_buckets`` and ``max_distance`` are its
      settings), so ``urpe`` vs ``t5_bias`` isolates ``C``. ``bias="none"`` uses ``C`` alone.
    """

    def __init__(
        self,
        dims: ModelDims,
        bias: str = "t5",
        num_buckets: int = 32,
        max_distance: int = 128,
        max_len: int | None = None,
    ) -> None:
        super().__init__(dims)
        max_len = dims.max_len if max_len is None else max_len
        if max_len < 1:
            raise ConfigError(
                f"pe.max_len must be >= 1 (or null: the run's longest), got {max_len}"
            )
        if bias not in URPE_BIASES:
            raise ConfigError(
                f"unknown pe.bias {bias!r} for pe=urpe; valid choices: {URPE_BIASES}"
            )
        try:
            self.rpe = T5BiasPE(dims, num_buckets, max_distance) if bias == "t5" else None
        except ConfigError as error:
            raise ConfigError(
                f"pe=urpe with bias=t5 (settings as for pe=t5_bias): {error}"
            ) from None
        self.behind = max_len - 1
        self.ahead = 0 if dims.causal else self.behind
        rows = self.behind + self.ahead + 1
        self.toeplitz = nn.Parameter(torch.ones(dims.n_layers, dims.n_heads, rows))

    def logit_bias(self, pos: Positions) -> Tensor | None:
        return None if self.rpe is None else self.rpe.logit_bias(pos)

    def modify_probs(self, probs: Tensor, pos: Positions, layer: int) -> Tensor:
        index = pos.memo(
            (id(self), "rows"), lambda: clipped_offset_index(pos, self.behind, self.ahead)
        )  # [b|1, i, j]
        toeplitz = rearrange(self.toeplitz[layer][:, index], "h b i j -> b h i j")
        return probs * toeplitz

    def extra_repr(self) -> str:
        return f"bias={'none' if self.rpe is None else 't5'}, rows={self.toeplitz.shape[-1]}"
