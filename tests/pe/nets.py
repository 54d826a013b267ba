"""The small model the encoding tests run through."""

from collections.abc import Callable

import torch

from pelab.models.dims import NetDims
from pelab.models.transformer import Transformer
from pelab.pe import ModelDims, PositionalEncoding

# the tokens the nets treat as digits of numbers (pe=abacus reads them); 10 and 11 are not
DIGITS = tuple(range(3, 10))


def sharp_net(
    pe: Callable[[ModelDims], PositionalEncoding],
    causal: bool = True,
    max_len: int = 64,
    d_model: int = 16,
    n_layers: int = 2,
    impl: str = "auto",
) -> Transformer:
    """A 2-head model over 12 tokens (``DIGITS`` among them) in eval mode, seeded, with weights
    drawn large (std 0.5) so attention is sharp and positions visibly matter."""
    torch.manual_seed(0)
    dims = NetDims(
        vocab_size=12,
        max_len=max_len,
        d_model=d_model,
        n_heads=2,
        n_layers=n_layers,
        attn_impl=impl,
        digit_tokens=DIGITS,
    )
    net = Transformer(dims, pe, causal)
    for p in net.parameters():
        torch.nn.init.normal_(p, std=0.5 if p.dim() > 1 else 1.0)
    return net.eval()
