"""Stick-breaking attention: the softmax replaced by breaking a stick from the nearest key back."""

from __future__ import annotations

from functools import partial
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pelab.pe.base import ModelDims, PositionalEncoding, in_fp32, register_pe
from pelab.positions import Positions

Remainder = Literal["bias", "drop"]  # pe.remainder


def stick_breaking_weights(logits: Tensor, attend_current: bool = False) -> Tensor:
    """``A_ij = beta_ij * prod_{j<k<i} (1 - beta_ik)`` with ``beta = sigmoid(z)``, for the
    masked logits ``z: [b, h, i, j]`` (``-inf`` where a key is hidden; the query rows are the last
    ``i`` of the ``j`` keys). Keys strictly before the query take part, and with
    ``attend_current`` the query's own key too (the stick then starts there). In log space:
    ``log A_ij = logsigmoid(z_ij) - sum_{k>j} softplus(z_ik)``, the sum running over the visible
    keys after ``j`` (a hidden key has ``softplus(-inf) = 0``). In the logits' dtype:
    ``StickBreakingPE.normalize`` hands it float32."""
    i, j = logits.shape[-2:]
    visible = torch.ones(i, j, dtype=torch.bool, device=logits.device)
    visible = visible.tril(diagonal=j - i - (0 if attend_current else 1))
    z = logits.masked_fill(~visible, -torch.inf)
    log_remaining = -F.softplus(z)  # log(1 - beta): 0 for a hidden key
    after = log_remaining.flip(-1).cumsum(-1).flip(-1) - log_remaining  # sum over k > j
    return (F.logsigmoid(z) + after).exp()


@register_pe("stick_breaking")
class StickBreakingPE(PositionalEncoding):
    """Stick-breaking attention (Tan, Shen, Yang, Courville & Panda 2025, "Scaling
    Stick-Breaking Attention"): in place of the softmax (``normalize``)::

        A_ij = beta_ij prod_{j<k<i} (1 - beta_ik),    beta_ij = sigmoid(q_i · k_j / sqrt(d))

    Walking back from the query, each key takes the share ``beta`` of what the nearer keys left
    of a unit stick, so nearer keys come first: a recency bias with no positional encoding at
    all, and each weight depends only on the logits between key and query (invariant to
    shifting positions, defined at any length). Weights need not sum to one. The remainder
    ``r_i = 1 - sum_j A_ij`` (``remainder``): ``bias`` (default) adds ``r_i b_h`` to the
    output, ``b`` a learned vector per layer and head starting at zero, as the authors' released
    model (IBM dolomite-engine's ``SBAttention``, ``rem * head_bias``); ``drop`` leaves it out,
    as the bare kernel. ``r`` is read off the probabilities ``modify_output`` receives (after
    attention dropout, when there is any). ``attend_current`` (default false, the kernel's
    default) lets the query attend to its own token; without it the first token attends to
    nothing. Causal models only: the stick is broken in the order of the sequence. Needs the
    eager kernel (the authors' fused kernel is Triton, for GPUs). Not included: the released
    model's per-head GroupNorm of the output, a change of the block.
    """

    position_dims = None
    shift = "relative"
    causal_only = True

    def __init__(
        self, dims: ModelDims, attend_current: bool = False, remainder: Remainder = "bias"
    ) -> None:
        super().__init__(dims)
        self.attend_current, self.remainder = attend_current, remainder
        if remainder == "bias":  # [l, h, d]
            shape = (dims.n_layers, dims.n_heads, dims.head_dim)
            self.head_bias = nn.Parameter(torch.zeros(shape))

    def normalize(self, logits: Tensor, pos: Positions, layer: int) -> Tensor:
        # float32, under autocast too: the sums in log space, and the weights themselves, whose
        # remainder 1 - sum_j A_ij (modify_output) would carry their bf16 rounding (2^-8 each)
        return in_fp32(partial(stick_breaking_weights, attend_current=self.attend_current), logits)

    def modify_output(self, out: Tensor, probs: Tensor, pos: Positions, layer: int) -> Tensor:
        if self.remainder == "drop":
            return out
        left = 1 - probs.sum(dim=-1, keepdim=True)  # [b, h, i, 1]
        return out + left * self.head_bias[layer][:, None].to(out.dtype)

    def extra_repr(self) -> str:
        return f"attend_current={self.attend_current}, remainder={self.remainder}"
