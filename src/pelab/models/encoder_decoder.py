"""The encoder–decoder Transformer (Vaswani et al. 2017, "Attention Is All You Need", section 3).

The encoder (bidirectional self-attention) reads the source; the decoder (causal
self-attention, then cross-attention to the encoder's output, then an MLP, per block) reads the
target and predicts its next token at every position.

Where positions act:

- The encoder and the decoder each have their **own encoding instance**, built from the same
  ``pe=`` factory with its own ``ModelDims`` (``causal=False`` for the encoder, ``True`` for the
  decoder), so a learned table, T5 bias or Shaw table of the encoder is not the decoder's, and an
  encoding defined for causal models only (``xpos``) refuses the encoder with a ``ConfigError``.
- Inside the encoder or the decoder the encoding acts exactly as in ``Transformer`` (encoder- or
  decoder-only): ``embed`` on its inputs, ``layer_input`` at its blocks, the attention hooks on
  its self-attention.
- **Cross-attention carries no encoding** (``NoPE``): positions reach it only through the
  representations of the encoder and the decoder, as in the original Transformer (sinusoids on
  the inputs of each only) and in T5 (relative bias on self-attention only). A relative offset
  between a decoder query and an encoder key would compare positions of two different sequences,
  which none of the encodings defines; cross-attention is therefore invariant to permuting the
  encoder's outputs (tested).

Sizes and settings are one ``NetDims``, as ``Transformer``'s (``pelab.models.dims``; ``n_layers``
each for the encoder and the decoder). The token embedding is shared by both (one vocabulary;
the paper, section 3.4, shares it); the output projection is separate, as in ``Transformer``,
and so is the network's form (``model.net.form``, ``pelab.models.form``), which both stacks
follow.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from pelab.errors import ConfigError
from pelab.models import stacked
from pelab.models.cache import KVCache
from pelab.models.dims import NetDims
from pelab.models.form import init_weights
from pelab.models.transformer import Block, Memory, run_blocks
from pelab.pe.base import ModelDims, PositionalEncoding
from pelab.positions import Positions


class Layers(nn.Module):
    """The encoder's (``causal=False``) or the decoder's (``causal=True``, with
    cross-attention) layers: its own encoding, ``n_layers`` blocks and a final LayerNorm
    (``form.final_norm``); ``[b, n, d_model]`` token embeddings -> ``[b, n, d_model]``."""

    def __init__(
        self, net: NetDims, pe: Callable[[ModelDims], PositionalEncoding], causal: bool
    ) -> None:
        super().__init__()
        form = net.form
        self.dims = net.encoding(causal)
        self.pe = pe(self.dims)
        form.check_encoding(self.pe)
        self.drop_embedded = nn.Dropout(net.dropout if form.drops_embeddings(self.pe) else 0.0)
        self.blocks = nn.ModuleList(
            Block(net, self.pe, i, cross_attention=causal) for i in range(net.n_layers)
        )
        self.norm = stacked.LayerNorm(net.d_model) if form.final_norm else nn.Identity()

    def forward(
        self,
        x: Tensor,
        tokens: Tensor,
        pos: Positions,
        cache: KVCache | None = None,
        memory: Memory | None = None,
    ) -> Tensor:
        return self.norm(
            run_blocks(self.pe, self.blocks, x, tokens, pos, cache, memory, self.drop_embedded)
        )


class EncoderDecoder(nn.Module):
    """``encode(source)`` -> ``Memory``; ``decode(target, memory)`` -> logits ``[b, m, vocab]``;
    ``forward(source, target)`` does both (teacher forcing). See the module docstring."""

    configured_by = NetDims  # model.net's options are its fields (check_types reads them there)

    def __init__(
        self,
        net: NetDims,
        pe: Callable[[ModelDims], PositionalEncoding],
        layered_positions: bool = False,
    ) -> None:
        super().__init__()
        if layered_positions:
            raise ConfigError(
                "positions.layers=each draws positions per layer for encoder-only models (the "
                "RPE code's encoder); model=encoder_decoder draws them once: set "
                "positions.layers=shared"
            )
        self.form = form = net.form
        self.token_factor = form.token_factor(net.d_model)
        self.dims = net.encoding(True)  # the decoder's; the encoder's differ only in ``causal``
        self.tok_emb = stacked.Embedding(net.vocab_size, net.d_model)
        try:
            self.encoder = Layers(net, pe, causal=False)
        except ConfigError as error:
            raise ConfigError(f"the encoder of model=encoder_decoder: {error}") from None
        self.decoder = Layers(net, pe, causal=True)
        self.head = stacked.Linear(net.d_model, net.vocab_size, bias=form.head_bias)
        init_weights(self, net.n_layers, form)

    def encode(self, tokens: Tensor, positions: Tensor | None = None) -> Memory:
        """``tokens: [b, n]`` and their positions (default ``0..n-1``) -> the encoder's output."""
        pos = Positions.of(positions, tokens.shape[1], tokens.device)
        return Memory(self.encoder(self.embed(tokens), tokens, pos), pos.q)

    def decode(
        self,
        tokens: Tensor,
        memory: Memory,
        positions: Tensor | None = None,
        cache: KVCache | None = None,
    ) -> Tensor:
        """Decoder logits ``[b, m, vocab]`` for ``tokens: [b, m]`` (positions default to
        ``0..m-1``). With a ``cache`` (``new_cache``) ``tokens`` are the next tokens after those
        already fed, as in ``Transformer.forward``."""
        if cache is not None:
            pos = cache.advance(tokens.shape[1], positions, tokens.device)
        else:
            pos = Positions.of(positions, tokens.shape[1], tokens.device)
        x = self.decoder(self.embed(tokens), tokens, pos, cache, memory)
        return self.head(x)

    def embed(self, tokens: Tensor) -> Tensor:
        """The shared token embedding ``[b, n, d_model]``, scaled as ``form.embedding`` says."""
        x = self.tok_emb(tokens)
        return x * self.token_factor if self.token_factor != 1.0 else x

    def forward(
        self,
        source: Tensor,
        target: Tensor,
        source_positions: Tensor | None = None,
        target_positions: Tensor | None = None,
    ) -> Tensor:
        """Teacher forcing: logits ``[b, m, vocab]`` of the decoder reading ``target: [b, m]``
        with cross-attention to the encoded ``source: [b, n]``."""
        return self.decode(target, self.encode(source, source_positions), target_positions)

    @property
    def supports_kv_cache(self) -> bool:
        """True when greedy decoding may feed the decoder one token per step."""
        return self.decoder.pe.supports_kv_cache

    @property
    def prefix_only(self) -> bool:
        """True when the decoder's output at each position depends only on its prefix."""
        return self.decoder.pe.prefix_only

    def new_cache(self, capacity: int) -> KVCache:
        """An empty decoder cache for up to ``capacity`` target tokens."""
        if not self.supports_kv_cache:
            raise ValueError(
                "this decoder's encoding cannot decode with a key/value cache; feed whole prefixes"
            )
        return KVCache(capacity, self.decoder.dims.n_layers)

    def num_params(self) -> dict[str, int]:
        """Total parameters and those of the two encodings (encoder's plus decoder's), of one
        member."""
        k = stacked.members_of(self)
        count = lambda module: sum(p.numel() for p in module.parameters()) // k  # noqa: E731
        return {"total": count(self), "pe": count(self.encoder.pe) + count(self.decoder.pe)}
