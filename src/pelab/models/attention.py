"""The one attention module. Every positional encoding acts through the hooks of
``pelab.pe.base.PositionalEncoding``; attention calls them all and never asks which encoding runs.

Self-attention reads queries, keys and values from its input ``x``. Cross-attention (the
encoder–decoder's decoder) reads queries from ``x`` and keys and values from a ``context`` (the
encoder's output), through the same module and the same hooks; the model gives it ``NoPE``, so
no encoding acts there (see ``pelab.models.encoder_decoder``).

Einstein notation: ``b`` batch, ``n`` tokens, ``h`` heads, ``d`` head dim, ``i``/``j`` query/key.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from pelab.models import stacked
from pelab.models.cache import LayerCache
from pelab.models.length_scale import AttnScale, LengthScale
from pelab.pe.base import PositionalEncoding, in_fp32, memo_derived
from pelab.positions import Positions

AttnImpl = Literal["auto", "eager", "fused"]  # model.net.attn_impl


def causal_mask(i: int, j: int, device: torch.device) -> Tensor:
    """``[i, j]`` booleans, True where query ``t`` (the last ``i`` of ``j`` tokens) may attend."""
    return torch.ones(i, j, dtype=torch.bool, device=device).tril(diagonal=j - i)


class Attention(nn.Module):
    """Multi-head attention with positional-encoding hooks.

    The kernel is chosen once, here: the fused ``scaled_dot_product_attention`` when the encoding
    only transforms q/k and/or adds a content-free bias (which it receives as the attention mask),
    the eager path otherwise. Both compute the same function (tested). The eager path computes
    the probabilities explicitly (``probabilities``), which is how
    ``pelab.models.attention_maps`` records them on either kernel.

    One ``[3 d_model, d_model]`` input projection serves both kinds, as in
    ``torch.nn.MultiheadAttention``: its rows give q, k and v of ``x`` (self-attention), or q of
    ``x`` and k, v of the context (cross-attention).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        causal: bool,
        pe: PositionalEncoding,
        layer: int,
        dropout: float = 0.0,
        impl: AttnImpl = "auto",
        length_scale: AttnScale = "none",
        train_len: int = 0,
    ) -> None:
        super().__init__()
        self.n_heads, self.causal, self.layer, self.dropout = n_heads, causal, layer, dropout
        self.head_dim = d_model // n_heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.qkv = stacked.Linear(d_model, 3 * d_model, bias=False)
        self.proj = stacked.Linear(d_model, d_model, bias=False)
        self._pe = (pe,)  # shared by all layers and owned by the model: not a submodule here
        fused = impl == "fused" or (impl == "auto" and not pe.needs_eager_attention())
        self.attend = self.attend_fused if fused else self.attend_eager
        # model.net.attn_scale; train_len: the longest training sequence (logn is 1 there)
        self.length_scale = LengthScale(length_scale, n_heads, train_len)

    @property
    def pe(self) -> PositionalEncoding:
        return self._pe[0]

    def forward(
        self,
        x: Tensor,
        pos: Positions,
        context: Tensor | None = None,
        cache: LayerCache | None = None,
    ) -> Tensor:
        """``x: [b, n, d_model]`` -> ``[b, n, d_model]``.

        ``pos`` holds the positions of the queries (``x``'s tokens) and of the keys. Without a
        cache, self-attention's keys are ``x``'s tokens. With a cache, ``x`` holds only the new
        tokens and ``pos.k`` covers every token fed so far: the new keys are transformed at their
        own positions and join the cached ones. Cross-attention (``context: [b, n_ctx,
        d_model]``): the keys are the context's tokens, projected once per cache.
        """
        if context is None:
            q, k, v = self.heads(self.qkv(x))
            # cached keys are already transformed: transform only the new ones, at their positions
            own = pos if cache is None else pos.memo("new tokens", lambda: Positions(pos.q, pos.q))
            q, k = self.pe.transform_qk(q, k, own, self.layer)
            if cache is not None:
                k, v = cache.append(k, v)
        else:
            q, k, v = self.cross_qkv(x, context, cache)
            q, k = self.pe.transform_qk(q, k, pos, self.layer)
        bias = self.bias(x, q, k, pos)
        q = self.length_scale(q, k.shape[2], self.causal)
        out = self.attend(q, k, v, pos, bias)
        return self.proj(rearrange(out, "b h n d -> b n (h d)"))

    def bias(self, x: Tensor, q: Tensor, k: Tensor, pos: Positions) -> Tensor | None:
        """The additive logit bias ``[b|1, h|1, i, j]`` (or None): the encoding's content-free
        ``logit_bias`` plus its ``input_bias`` of this block's attention input ``x`` and its
        queries and keys, ``q`` before the length scale: an additive bias keeps its size at any
        length (a gate reads q as the paper's does), while a bias that is part of the q.k score
        (``pe.scores_content``, PaTH) is scaled with the logits."""
        fixed = self.pe.logit_bias(pos, self.layer)
        dynamic = self.pe.input_bias(x, q, k, pos, self.layer)
        if dynamic is not None and self.pe.scores_content:  # [b, h, i, j]: rows like q's
            dynamic = self.length_scale(dynamic, k.shape[2], self.causal)
        if dynamic is None or fixed is None:
            return fixed if dynamic is None else dynamic
        return fixed + dynamic

    def heads(self, projected: Tensor) -> Tensor:
        """``[b, n, parts * d_model]`` -> ``[parts, b, h, n, d]`` (e.g. q, k, v of each token)."""
        return rearrange(
            projected, "b n (parts h d) -> parts b h n d", h=self.n_heads, d=self.head_dim
        )

    def cross_qkv(
        self, x: Tensor, context: Tensor, cache: LayerCache | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Queries of ``x``; keys and values of ``context``, from the cache after the first
        decoding step (the context does not change while the decoder generates)."""
        d_model = x.shape[-1]
        (q,) = self.heads(self.qkv(x, rows=slice(None, d_model)))

        def context_kv() -> tuple[Tensor, Tensor]:
            k, v = self.heads(self.qkv(context, rows=slice(d_model, None)))
            return k, v

        k, v = context_kv() if cache is None else cache.context(context_kv)
        return q, k, v

    def attend_eager(
        self, q: Tensor, k: Tensor, v: Tensor, pos: Positions, bias: Tensor | None
    ) -> Tensor:
        return self.values(self.probabilities(q, k, pos, bias), v, pos)

    def probabilities(self, q: Tensor, k: Tensor, pos: Positions, bias: Tensor | None) -> Tensor:
        """``modify_probs(normalize(mask(modify_logits(q k^T / sqrt(d) + bias))))``, the
        attention probabilities ``[b, h, i, j]`` (before dropout), with every hook; ``bias`` is
        ``Attention.bias`` and ``normalize`` a softmax unless the encoding replaces it."""
        pe = self.pe
        logits = torch.einsum("bhid,bhjd->bhij", q, k) * self.scale
        if bias is not None:
            logits = logits + bias
        logits = pe.modify_logits(logits, q, k, pos, self.layer)
        if self.causal:  # the mask comes after every encoding hook, so no bias can unmask
            logits = logits.masked_fill(~causal_mask(q.shape[2], k.shape[2], q.device), -math.inf)
        return pe.modify_probs(pe.normalize(logits, pos, self.layer), pos, self.layer)

    def values(self, probs: Tensor, v: Tensor, pos: Positions) -> Tensor:
        """The output ``[b, h, i, d]`` of the probabilities ``[b, h, i, j]`` and values
        ``v: [b, h, j, d]``: dropout, ``probs @ v``, then ``modify_output``."""
        dropped = F.dropout(probs, self.dropout, self.training)
        return self.pe.modify_output(dropped @ v, dropped, pos, self.layer)

    def attend_fused(
        self, q: Tensor, k: Tensor, v: Tensor, pos: Positions, bias: Tensor | None
    ) -> Tensor:
        """``softmax(q k^T / sqrt(d) + bias + causal mask) v`` by the fused kernel, ``[b, h, i,
        d]``. The kernel takes its mask in the dtype of q, and autocast casts all its inputs, the
        mask too, to bf16: with a bias it runs in float32 outside autocast (``in_fp32``), so the
        bias keeps float32 as on the eager path, which adds it to the logits in float32."""
        i, j = q.shape[2], k.shape[2]
        mask = bias
        if self.causal and (bias is not None or i != j):
            # once per forward for a bias all layers share, per layer for a per-layer bias
            mask = memo_derived(
                pos, "causal mask", (bias,), lambda: _mask_future(bias, i, j, q.device)
            )

        def kernel(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
            return F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=mask,
                dropout_p=self.dropout if self.training else 0.0,
                is_causal=self.causal and mask is None,
                scale=self.scale,
            )

        if bias is None:  # at most a causal mask of 0 and -inf, exact in any dtype
            return kernel(q, k, v, None if mask is None else mask.to(q.dtype))
        return in_fp32(kernel, q, k, v, mask)


def _mask_future(bias: Tensor | None, i: int, j: int, device: torch.device) -> Tensor:
    """An additive mask: ``bias`` (or zeros) with -inf where a query would see a later key."""
    allowed = causal_mask(i, j, device)
    base = torch.zeros(i, j, device=device) if bias is None else bias
    return base.masked_fill(~allowed, -math.inf)
