"""A small pre-norm Transformer whose positional encoding is injected, not hard-wired."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from pelab.models.attention import Attention
from pelab.pe.base import ConfigError, ModelDims, PositionalEncoding, Positions


class MLP(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model), nn.Dropout(dropout)
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class Block(nn.Module):
    """``x + attn(norm(x))`` then ``x + mlp(norm(x))``."""

    def __init__(
        self,
        dims: ModelDims,
        d_ff: int,
        pe: PositionalEncoding,
        layer: int,
        dropout: float,
        attn_impl: str,
    ) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dims.d_model), nn.LayerNorm(dims.d_model)
        self.attn = Attention(
            dims.d_model, dims.n_heads, dims.causal, pe, layer, dropout, attn_impl
        )
        self.mlp = MLP(dims.d_model, d_ff, dropout)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, pos: Positions) -> Tensor:
        x = x + self.drop(self.attn(self.norm1(x), pos))
        return x + self.mlp(self.norm2(x))


class Transformer(nn.Module):
    """Token embedding -> ``pe.embed`` -> blocks -> norm -> vocabulary logits.

    ``pe`` is a factory (a partially configured encoding class) called with the model's
    ``ModelDims``; one instance is shared by all layers, so its parameters are counted once.
    ``causal=True`` gives a decoder, ``False`` an encoder.
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        causal: bool,
        pe: Callable[[ModelDims], PositionalEncoding],
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        d_ff: int | None = None,
        dropout: float = 0.0,
        attn_impl: str = "auto",
        position_dims: int = 1,
    ) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ConfigError(
                f"model.net.d_model={d_model} is not divisible by model.net.n_heads={n_heads}"
            )
        for name, value in (("d_model", d_model), ("n_heads", n_heads), ("n_layers", n_layers)):
            if value < 1:
                raise ConfigError(f"model.net.{name} must be >= 1, got {value}")
        self.dims = ModelDims(
            d_model, n_heads, n_layers, causal, max_len, vocab_size, position_dims
        )
        self.pe = pe(self.dims)
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList(
            Block(self.dims, d_ff or 4 * d_model, self.pe, i, dropout, attn_impl)
            for i in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self._init_weights(n_layers)

    def _init_weights(self, n_layers: int) -> None:
        for name, p in self.named_parameters():
            if name.startswith("pe."):
                continue  # each encoding initialises its own parameters, as its paper does
            if p.dim() == 2 and not name.startswith("tok_emb"):
                std = (
                    0.02 / (2 * n_layers) ** 0.5
                    if name.endswith(("proj.weight", "net.2.weight"))
                    else 0.02
                )
                nn.init.normal_(p, std=std)

    def forward(self, tokens: Tensor, positions: Tensor | None = None) -> Tensor:
        """``tokens: [b, n]``, optional ``positions: [b|1, n]`` (default 0..n-1; ``[b|1, n, k]``
        for k-D positions) -> logits ``[b, n, vocab]``."""
        pos = (
            Positions.contiguous(tokens.shape[1], tokens.device)
            if positions is None
            else Positions.from_tensor(positions)
        )
        x = self.pe.embed(self.tok_emb(tokens), tokens, pos)
        for layer, block in enumerate(self.blocks):
            x = block(self.pe.layer_input(x, pos, layer), pos)
        return self.head(self.norm(x))

    def num_params(self) -> dict[str, int]:
        """Total and positional-encoding parameter counts (shared tensors counted once)."""
        count = lambda module: sum(p.numel() for p in module.parameters())  # noqa: E731
        return {"total": count(self), "pe": count(self.pe)}
