"""PaTH: keys seen through a product of data-dependent Householder-like transforms."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims, PositionalEncoding, in_fp32, register_pe
from pelab.positions import Positions


def path_bias(q: Tensor, k: Tensor, w: Tensor, beta: Tensor) -> Tensor:
    """``q_i^T (H_i H_{i-1} ... H_{j+1} - I) k_j`` for ``j <= i``, 0 above the diagonal, with
    ``H_s = I - beta_s w_s w_s^T``; ``q, k, w: [b, h, n, d]`` (``w`` unit vectors), ``beta:
    [b, h, n]`` -> ``[b, h, i, j]``.

    ``q_i^T H_i ... H_{j+1} = (H_{j+1} ... H_i q_i)^T`` (each ``H`` is symmetric), so walking the
    offset ``t = i - j`` up from 0 applies one more ``H`` to every query at once:
    ``u_i <- H_{i-t} u_i``. The correction ``u_i - q_i`` is carried instead of ``u_i`` (no
    cancellation). ``O(n^2 d)`` work in ``n`` vectorised steps."""
    n = q.shape[-2]
    delta = torch.zeros_like(q)  # row r: u_i - q_i for query i = t + r
    diagonals = []  # t-th: [b, h, n - t], the pairs (i, j) = (t + r, r)
    for t in range(n):
        rows = q[..., t:, :]
        diagonals.append(F.pad((delta * k[..., : n - t, :]).sum(-1), (0, t)))
        if t + 1 < n:  # u_i <- H_{i-t} u_i for i = t + 1 .. n - 1: the next offset's rows
            u = rows[..., 1:, :] + delta[..., 1:, :]
            ws, bs = w[..., 1 : n - t, :], beta[..., 1 : n - t, None]
            delta = delta[..., 1:, :] - bs * ws * (ws * u).sum(-1, keepdim=True)
    by_offset = torch.stack(diagonals, dim=-2)  # [b, h, t, j]
    i = torch.arange(n, device=q.device)
    offset = (i[:, None] - i[None, :]).clamp(min=0)  # [i, j]
    bias = by_offset.gather(-2, offset.expand(*by_offset.shape[:-2], n, n))
    return bias.masked_fill(i[:, None] < i[None, :], 0.0)


class ShortConvolution(nn.Module):
    """A causal depthwise convolution over the sequence, then SiLU: ``[b, n, c] -> [b, n, c]``,
    each channel mixing its last ``kernel`` values."""

    def __init__(self, channels: int, kernel: int) -> None:
        super().__init__()
        self.kernel = kernel
        self.conv = nn.Conv1d(channels, channels, kernel, groups=channels, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        padded = F.pad(rearrange(x, "b n c -> b c n"), (self.kernel - 1, 0))
        return F.silu(rearrange(self.conv(padded), "b c n -> b n c"))


class HouseholderMaps(nn.Module):
    """One layer's ``w_t`` and ``beta_t`` from the attention input ``x_t``: ``w`` a low-rank
    projection (``d_model -> rank -> d_model``), a short convolution, then unit length per head;
    ``beta = 2 sigmoid(W_beta x + b)`` per head, in (0, 2)."""

    def __init__(self, dims: ModelDims, rank: int, kernel: int) -> None:
        super().__init__()
        self.n_heads = dims.n_heads
        self.w = nn.Sequential(
            nn.Linear(dims.d_model, rank, bias=False), nn.Linear(rank, dims.d_model, bias=False)
        )
        self.conv = ShortConvolution(dims.d_model, kernel)
        self.beta = nn.Linear(dims.d_model, dims.n_heads)
        nn.init.zeros_(self.beta.bias)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        w = rearrange(self.conv(self.w(x)), "b n (h d) -> b h n d", h=self.n_heads)
        beta = 2 * torch.sigmoid(rearrange(self.beta(x), "b n h -> b h n"))
        return F.normalize(w, dim=-1), beta


@register_pe("path")
class PathPE(PositionalEncoding):
    """PaTH (Yang, Shen, Wen, Tan, Mishra, Ren, Panda & Kim 2025, "PaTH Attention: Position
    Encoding via Accumulating Householder Transformations")::

        logit_ij = q_i^T (H_i H_{i-1} ... H_{j+1}) k_j / sqrt(d),    H_t = I - beta_t w_t w_t^T

    RoPE's fixed rotation per step becomes a data-dependent Householder-like transform of each
    token, accumulated from the key to the query (the diagonal is plain ``q_i^T k_i``). As the
    released code (fla-org/flash-linear-attention, ``PaTHAttention`` and ``naive_path_attn``):
    ``w_t`` from the block's attention input by a low-rank projection (``rank`` 32), a causal
    short convolution (``kernel`` 3, SiLU) and unit length per head; ``beta_t = 2
    sigmoid(W_beta x_t + b)`` per head, in (0, 2) (eigenvalue ``1 - beta`` in (-1, 1)), ``b``
    starting at 0; PyTorch's default initialisation otherwise; no other encoding. pelab adds
    ``q_i^T (H_i ... H_{j+1} - I) k_j / sqrt(d)`` to the plain logits (``input_bias``, so the
    fused kernel still runs), computed exactly in ``O(n^2 d)`` (``path_bias``) instead of the
    paper's chunked GPU kernel. Not included: the optional forget gate and QK-norm (off by
    default in the released layer). Causal models only; no key/value cache (the transforms
    of every earlier token are needed); reads no positions.
    """

    position_dims = None
    shift = "relative"
    causal_only = True
    supports_kv_cache = False
    scores_content = True  # the bias is q's score through the transforms: it scales with q

    def __init__(self, dims: ModelDims, rank: int = 32, kernel: int = 3) -> None:
        super().__init__(dims)
        if rank < 1 or kernel < 1:
            raise ConfigError(
                f"pe.rank and pe.kernel must be >= 1 for pe=path, got rank={rank}, kernel={kernel}"
            )
        self.maps = nn.ModuleList(
            HouseholderMaps(dims, rank, kernel) for _ in range(dims.n_layers)
        )
        self.scale = dims.head_dim**-0.5

    def input_bias(self, x: Tensor, q: Tensor, k: Tensor, pos: Positions, layer: int) -> Tensor:
        def bias(x: Tensor, q: Tensor, k: Tensor) -> Tensor:
            return self.scale * path_bias(q, k, *self.maps[layer](x))

        # the maps and the products in float32, under autocast too; the bias stays float32
        return in_fp32(bias, x, q, k)
