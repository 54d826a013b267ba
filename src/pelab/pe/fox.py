"""FoX: a data-dependent forget gate per head, as a bias on the attention logits."""

from __future__ import annotations

import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from pelab.errors import ConfigError
from pelab.pe.base import PE_REGISTRY, ModelDims, PositionalEncoding, register_pe
from pelab.pe.composed import ComposedPE
from pelab.positions import Positions

# bases FoX cannot be composed with, and why
UNFIT_BASES = {
    "fox": "FoX itself",
    "dape": "DAPE reads its scores as logits minus its own bias, which FoX's bias would join",
}


def forget_bias(log_f: Tensor) -> Tensor:
    """``D_ij = sum_{l=j+1..i} log f_l = c_i - c_j`` with ``c = cumsum(log f)``, for the log
    forget gates ``log_f: [b, h, n]`` -> ``[b, h, i, j]`` (``D_ii = 0``; entries with ``j > i``
    are the causal mask's to hide)."""
    c = log_f.cumsum(dim=-1)  # [b, h, n]
    return c[..., :, None] - c[..., None, :]


class ForgetGate(PositionalEncoding):
    """The forget gates of FoX: per layer and head, ``f_t = sigmoid(w · x_t + b)`` of the
    block's attention input ``x_t`` (the normed residual stream), and the logit bias
    ``D_ij = sum_{l=j+1..i} log f_l`` (``input_bias``). ``log f`` is ``logsigmoid``, exact for
    gates near 0. Reads no positions: the gates are computed from the tokens, so any
    position information comes from the causal order alone."""

    position_dims = None
    shift = "relative"
    causal_only = True  # the product of gates runs from the key to the query: a causal order
    supports_kv_cache = False  # D needs the gates of every earlier token, not only the new ones

    def __init__(self, dims: ModelDims) -> None:
        super().__init__(dims)
        self.gates = nn.ModuleList(
            nn.Linear(dims.d_model, dims.n_heads) for _ in range(dims.n_layers)
        )
        for gate in self.gates:  # the paper's: N(0, 0.02) weights, zero bias (f = 1/2)
            nn.init.normal_(gate.weight, std=0.02)
            nn.init.zeros_(gate.bias)

    def input_bias(self, x: Tensor, q: Tensor, k: Tensor, pos: Positions, layer: int) -> Tensor:
        log_f = F.logsigmoid(rearrange(self.gates[layer](x), "b n h -> b h n").float())
        return forget_bias(log_f).to(x.dtype)


@register_pe("fox")
class ForgettingPE(ComposedPE):
    """FoX (Lin, Nikishin, He & Courville 2025, "Forgetting Transformer: Softmax Attention with a
    Forget Gate")::

        o_i = sum_j exp(q_i·k_j/sqrt(d) + D_ij) v_j / sum_j exp(q_i·k_j/sqrt(d) + D_ij),
        D_ij = sum_{l=j+1..i} log f_l,    f_t = sigmoid(w_h · x_t + b_h)

    A data-dependent decay: each token decides how much of the past it lets through, and the
    logit of a key drops by the log-gates of every token after it. With every ``f = const`` it is
    ALiBi with slope ``-log f``. The paper's FoX runs without a positional encoding
    (``base: none``, the default); ``base`` composes the gates with another encoding's hooks
    (e.g. ``rope``, which the paper also ablates), built with that encoding's defaults.
    As the released code (zhixuan-lin/forgetting-transformer): one gate projection (with bias)
    per layer and head from the attention input (the normed stream q, k, v come from), weights
    ``N(0, 0.02)`` and bias 0 (every gate starts near 1/2), ``log f`` by ``logsigmoid`` in fp32.
    Not included: the "Pro" block (key/value shift, QK-norm, output gate and norm), a change of
    the block, not of the encoding.
    """

    position_dims = None
    shift = "relative"
    causal_only = True  # as its gate part (the instance takes these from its parts)
    supports_kv_cache = False

    def __init__(self, dims: ModelDims, base: str = "none") -> None:
        valid = sorted(set(PE_REGISTRY) - set(UNFIT_BASES))
        if base not in valid:
            why = UNFIT_BASES.get(base, "an unknown encoding")
            raise ConfigError(
                f"pe.base={base!r} cannot carry pe=fox ({why}); valid choices: {', '.join(valid)}"
            )
        parts = {"gate": ForgetGate}
        if base != "none":
            parts["base"] = PE_REGISTRY[base]
        super().__init__(dims, parts)
