"""CABLE: per-token, per-head learned steps summed along the sequence, a data-dependent ALiBi."""

from __future__ import annotations

from typing import Literal

import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from pelab.pe.base import ModelDims, PositionalEncoding, in_fp32, register_pe
from pelab.pe.fox import forget_bias
from pelab.positions import Positions

# pe.weight: what multiplies the summed steps of query i. token: the paper's CABLE, a learned
# weight per query token and head; none: the paper's CABLE_NW, no weight (1)
CableWeight = Literal["token", "none"]


@register_pe("cable")
class CablePE(PositionalEncoding):
    """CABLE (Veisi, Amirzadeh & Mansourian 2025, "Context-aware Biases for Length
    Extrapolation", arXiv 2503.08067, section 3), per layer ``l`` and head ``h``::

        logit_ij += w_i · (S_i - S_j) = -w_i · sum_{t=j+1..i} r_t,    S_i = -sum_{t<=i} r_t,
        r_t = relu(a_h · x_t + c_h) >= 0,    w_i = softplus(u_h · x_i + e_h) > 0

    ``x_t`` is the block's attention input (the normed residual stream q, k, v are read from).
    Each token takes a learned step per head; the bias of a pair is minus the steps of the tokens
    after the key up to the query, weighted per query token. With a constant step ``m_h`` and
    ``w = 1`` it is ALiBi, ``-m_h (i - j)``, as the paper states. ``S`` is the inclusive
    cumulative sum, so ``S_i - S_j`` holds ``r_{j+1} .. r_i`` and ``logit_ii`` gets 0.

    Paper and code disagree; pelab follows the paper's text:
    - sign: the paper's equation 2 writes the step as ``+relu(.)``, so ``S_i - S_j`` would grow
      with the distance and favour far keys, against its own text (distant query-key pairs are
      penalised, an inductive bias like a sliding window) and its reduction to ALiBi. pelab
      takes ``-relu``: the bias is <= 0 and falls with every token between key and query.
    - weight: the paper's CABLE multiplies the summed steps by a learned weight per token and
      head from a second linear map (its "two additional linear layers"), whose exact form could
      not be read here (only the paper's abstract and introduction were reachable). The default,
      ``weight: none``, is the part established (the paper's CABLE_NW); ``weight: token`` offers
      the form of later code in the authors' style (``cable_layer_scale``: a softplus, on the
      query's row), not verified against the paper's equations.
    - the released code (axiomlab/Cable, ``src/Cable.py``, ``CausalSelfAttention.forward``) has
      no weight and the step ``-softplus(W x + c)``: that is exactly FoX with the forget gate
      ``sigmoid(-(W x + c))`` (``log sigmoid(-z) = -softplus(z)``), so the code's CABLE is
      ``pe=fox`` with its gate weights negated (tested), and no option here.
    - init (not given by the paper): both maps ``N(0, 0.02)``, bias 0, as every linear layer of
      the released code (nanoGPT's init): steps ``relu`` of a small number, ``w`` near ``log 2``.
    Not included, their definitions not being established from the paper: K-CABLE, its
    kernelised ablation, and the bidirectional (BERT) form, whose bias for keys after the query
    is not given; so CABLE is causal only here. Nor the released attention's unscaled ``q·k``
    (``src/Cable.py`` divides by ``sqrt(C / n_embd) = 1``): a change of attention, which keeps
    ``1/sqrt(d)`` here as for every encoding.
    Both maps, the steps and the sums run in float32 (``in_fp32``); per layer, no positions
    read: order comes from the causal sums alone.
    """

    position_dims = None
    shift = "relative"  # reads no positions
    causal_only = True  # the sum runs from the key to the query: a causal order
    supports_kv_cache = False  # S needs the steps of every earlier token, not only the new ones

    def __init__(self, dims: ModelDims, weight: CableWeight = "none") -> None:
        super().__init__(dims)
        self.weighting = weight

        def maps() -> nn.ModuleList:
            layers = nn.ModuleList(
                nn.Linear(dims.d_model, dims.n_heads) for _ in range(dims.n_layers)
            )
            for layer in layers:  # the released code's init (nanoGPT): N(0, 0.02), bias 0
                nn.init.normal_(layer.weight, std=0.02)
                nn.init.zeros_(layer.bias)
            return layers

        self.steps = maps()  # r_t = relu(a · x_t + c)
        self.scales = maps() if weight == "token" else None  # w_i = softplus(u · x_i + e)

    def input_bias(self, x: Tensor, q: Tensor, k: Tensor, pos: Positions, layer: int) -> Tensor:
        return in_fp32(lambda x: self.bias(x, layer), x)  # float32 under autocast

    def bias(self, x: Tensor, layer: int) -> Tensor:
        """The bias ``[b, h, i, j]`` of block ``layer`` for its attention input ``x: [b, n,
        d_model]`` (entries with ``j > i`` are the causal mask's to hide)."""
        r = F.relu(rearrange(self.steps[layer](x), "b n h -> b h n"))  # [b, h, n], >= 0
        bias = forget_bias(-r)  # S_i - S_j = -sum_{t=j+1..i} r_t: [b, h, i, j]
        if self.scales is None:
            return bias
        w = F.softplus(rearrange(self.scales[layer](x), "b n h -> b h n"))  # [b, h, n], > 0
        return w[..., :, None] * bias  # each query's row times its weight
