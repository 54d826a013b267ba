"""Complex-order word embeddings: each token's embedding turns with position at its own speed."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims, PositionalEncoding, register_pe
from pelab.positions import Positions


@register_pe("complex_order")
class ComplexOrderPE(PositionalEncoding):
    """Wang, Zhao, Lioma, Li, Zhang and Simonsen 2020, "Encoding word order in complex
    embeddings" (ICLR 2020). Token ``j`` at position ``p`` is the complex vector

        ``f(j, p) = r_j * exp(i (w_j p + theta_j))``   in ``C^D``, elementwise per dimension,

    with amplitude ``r_j``, frequency ``w_j`` and initial phase ``theta_j`` learned per token and
    per dimension. Moving a token by ``k`` positions multiplies it by ``exp(i w_j k)``, a fixed
    rotation that does not depend on ``p`` (the paper's "position-free offset transformation"),
    and ``|f(j, p)| = r_j`` at every position (its "boundedness").

    Real view. The rest of pelab's network is real-valued (the paper's complex-valued Transformer
    is out of scope), so with ``d_model = 2D`` the encoding works on ``[Re || Im]``. The model's
    token embedding ``x = tok_emb(j)`` is read as ``c_j = x[:D] + i x[D:] = r_j exp(i theta_j)``:
    that is exactly the paper's amplitude and initial phase, so they need no tables of their own
    and no parameter is dead. The encoding adds only the frequency table ``w: [vocab, D]`` and
    returns the real view of ``c_j exp(i w_j p)``::

        [x_re cos(w_j p) - x_im sin(w_j p)  ||  x_re sin(w_j p) + x_im cos(w_j p)]

    At ``p = 0`` the output is ``x``. The encoding is absolute: shifting all positions by ``s``
    turns each token by its own ``w_j s``, which the network sees. It is defined and bounded at
    every position, so it runs at any length.

    Initialisation: the paper states none that we could verify. The authors' released code
    (iclr-complex-order/complex-order) starts every token's frequencies at Vaswani's sinusoid
    frequencies; we use the ``D`` frequencies of a ``d_model``-dimensional sinusoid,
    ``w_{j,k} = base^(-2k / d_model)`` for ``k < D``, identical for all tokens (their PyTorch
    Transformer repeats each frequency twice instead). The model thus starts as a
    token-independent rotation of the embeddings, and training makes the speeds token-specific.
    """

    shift = "absolute"

    def __init__(self, dims: ModelDims, base: float = 10000.0) -> None:
        super().__init__(dims)
        if dims.d_model % 2:
            raise ConfigError(
                f"pe={self.pe_name} needs an even model.net.d_model (real and imaginary halves), "
                f"got {dims.d_model}; use e.g. model.net.d_model={dims.d_model + 1}"
            )
        if dims.vocab_size < 1:
            raise ConfigError(
                f"pe={self.pe_name} learns a frequency per token and needs ModelDims.vocab_size "
                f">= 1, got {dims.vocab_size}; build it through the Transformer, which passes it"
            )
        if base <= 0:
            raise ConfigError(f"pe={self.pe_name} needs pe.base > 0, got {base}")
        half = dims.d_model // 2
        self.freq = nn.Embedding(dims.vocab_size, half)  # w: [vocab, D]
        inv_freq = base ** (-torch.arange(0, dims.d_model, 2, dtype=torch.float32) / dims.d_model)
        with torch.no_grad():
            self.freq.weight.copy_(inv_freq.expand(dims.vocab_size, half))

    def embed(self, x: Tensor, tokens: Tensor, pos: Positions) -> Tensor:
        re, im = x.chunk(2, dim=-1)  # [b, n, D] each: c = re + i im = r exp(i theta)
        omega = self.freq(tokens)  # [b, n, D]
        dtype = torch.promote_types(omega.dtype, torch.float32)  # phases w p need >= fp32
        angle = pos.q[..., None].to(dtype) * omega.to(dtype)  # [b|1, n, 1] * [b, n, D]
        cos, sin = angle.cos(), angle.sin()
        rotated = (re * cos - im * sin, re * sin + im * cos)  # c * exp(i w p)
        return torch.cat(rotated, dim=-1).to(x.dtype)

    def extra_repr(self) -> str:
        return f"vocab_size={self.freq.num_embeddings}, complex_dim={self.freq.embedding_dim}"
