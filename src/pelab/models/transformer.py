"""A small Transformer whose positional encoding is injected, not hard-wired: pre-norm by
default, or another form (``model.net.form``, ``pelab.models.form``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor, nn

from pelab.errors import ConfigError
from pelab.models import stacked
from pelab.models.attention import Attention
from pelab.models.cache import KVCache
from pelab.models.dims import NetDims
from pelab.models.form import ACTIVATIONS, init_weights
from pelab.pe.base import ModelDims, NoPE, PositionalEncoding
from pelab.positions import Positions


class MLP(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float, activation: str = "gelu") -> None:
        super().__init__()
        self.net = nn.Sequential(
            stacked.Linear(d_model, d_ff),
            ACTIVATIONS[activation](),
            stacked.Linear(d_ff, d_model),
            nn.Dropout(dropout),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


@dataclass
class Memory:
    """What the decoder of an encoder–decoder attends to: the encoder's output
    ``states: [b, n_src, d_model]`` and the positions of its tokens, ``[b|1, n_src(, k)]``."""

    states: Tensor
    positions: Tensor


class Block(nn.Module):
    """``x + attn(norm(x))``, then (with ``cross_attention``) ``x + cross(norm(x), memory)``,
    then ``x + mlp(norm(x))``: the pre-norm form of Vaswani et al. 2017's encoder and decoder
    layers; ``form.norm="post"``: their own form, ``norm(x + attn(x))``, ... (the RPE code's).

    Cross-attention gets ``NoPE``: positions reach it only through the representations of the
    encoder and the decoder, as in the original Transformer and in T5 (whose relative bias acts
    on self-attention only). A relative offset between a decoder query and an encoder key
    compares positions of two different sequences, which no encoding defines.

    ``net``: the network's sizes and settings; ``pe``: the encoding of the block's stack, whose
    ``dims`` say whether the stack is causal.
    """

    def __init__(
        self, net: NetDims, pe: PositionalEncoding, layer: int, cross_attention: bool = False
    ) -> None:
        super().__init__()
        form, dims = net.form, pe.dims  # the encoding's dims: its stack's, causal or not
        self.post_norm = form.norm == "post"
        attention_dropout = net.dropout if form.attention_dropout else 0.0  # on the probabilities
        self.norm1, self.norm2 = stacked.LayerNorm(net.d_model), stacked.LayerNorm(net.d_model)
        self.attn = Attention(
            net.d_model,
            net.n_heads,
            dims.causal,
            pe,
            layer,
            attention_dropout,
            net.attn_impl,
            net.attn_scale,
            net.train_max_len or net.max_len,
        )
        self.mlp = MLP(net.d_model, net.d_ff, net.dropout, form.activation)
        self.drop = nn.Dropout(net.dropout)
        self.cross = None
        if cross_attention:
            self.norm_cross = stacked.LayerNorm(net.d_model)
            self.cross = Attention(
                net.d_model,
                net.n_heads,
                False,
                NoPE(dims),
                layer,
                attention_dropout,
                net.attn_impl,
            )

    def forward(
        self,
        x: Tensor,
        pos: Positions,
        cache: KVCache | None = None,
        memory: Memory | None = None,
    ) -> Tensor:
        layer = self.attn.layer
        self_cache = None if cache is None else cache.self_attn[layer]
        x = self.residual(x, self.norm1, lambda h: self.drop(self.attn(h, pos, cache=self_cache)))
        if self.cross is not None:
            cross_pos = pos.memo("cross", lambda: Positions(pos.q, memory.positions))
            cross_cache = None if cache is None else cache.cross_attn[layer]
            x = self.residual(
                x,
                self.norm_cross,
                lambda h: self.drop(
                    self.cross(h, cross_pos, context=memory.states, cache=cross_cache)
                ),
            )
        return self.residual(x, self.norm2, self.mlp)

    def residual(self, x: Tensor, norm: nn.Module, f: Callable[[Tensor], Tensor]) -> Tensor:
        """``x + f(norm(x))`` (pre-norm) or ``norm(x + f(x))`` (post-norm)."""
        return norm(x + f(x)) if self.post_norm else x + f(norm(x))


def run_blocks(
    pe: PositionalEncoding,
    blocks: nn.ModuleList,
    x: Tensor,
    tokens: Tensor,
    pos: Positions,
    cache: KVCache | None = None,
    memory: Memory | None = None,
    embedded: Callable[[Tensor], Tensor] = lambda x: x,
) -> Tensor:
    """The body of a ``Transformer`` and of an encoder-decoder's encoder and decoder:
    ``pe.embed`` once, then each block after ``pe.layer_input``. ``x: [b, n, d_model]`` token
    embeddings -> ``[b, n, d_model]`` (before the final norm). The encoding's parameters are
    constrained first (``PositionalEncoding.constrain``). ``embedded``: what follows
    ``pe.embed`` (the RPE code's dropout). Positions drawn per layer
    (``Positions.layered``): the embedding reads draw 0, block ``l`` draw ``l + 1``."""
    pe.constrain()
    draws = pos.layer_draws(len(blocks)) if pos.layered else [pos] * (len(blocks) + 1)
    x = embedded(pe.embed(x, tokens, draws[0]))
    for layer, block in enumerate(blocks):
        x = block(pe.layer_input(x, draws[layer + 1], layer), draws[layer + 1], cache, memory)
    return x


class Transformer(nn.Module):
    """Token embedding -> ``pe.embed`` -> blocks -> norm -> vocabulary logits.

    ``net``: its sizes and settings (``pelab.models.dims.NetDims``: ``model.net``'s options,
    the task's vocabulary and lengths), among them ``attn_scale``, length-scaled
    self-attention (``pelab.models.length_scale``), and ``form``: norm placement, final norm,
    activation, head bias, initialisation and token embedding (``pelab.models.form``).
    ``pe`` is a factory (a partially configured encoding class) called with the model's
    ``ModelDims`` (``net.encoding(causal)``); one instance is shared by all layers, so its
    parameters are counted once. ``causal=True`` gives a decoder, ``False`` an encoder.
    ``layered_positions``: ``forward`` gets a draw of positions per layer,
    ``[b|1, n, 1 + n_layers]`` (``positions.layers=each``).
    """

    configured_by = NetDims  # model.net's options are its fields (check_types reads them there)

    def __init__(
        self,
        net: NetDims,
        pe: Callable[[ModelDims], PositionalEncoding],
        causal: bool,
        layered_positions: bool = False,
    ) -> None:
        super().__init__()
        self.form = form = net.form
        if layered_positions and causal:
            raise ConfigError(
                "positions.layers=each draws positions per layer for encoders (the RPE code's "
                "encoder); a decoder draws them once: set positions.layers=shared"
            )
        self.layered_positions = layered_positions
        self.dims = net.encoding(causal)
        self.pe = pe(self.dims)
        form.check_encoding(self.pe)
        self.tok_emb = stacked.Embedding(net.vocab_size, net.d_model)
        self.token_factor = form.token_factor(net.d_model)
        self.drop_embedded = nn.Dropout(net.dropout if form.drops_embeddings(self.pe) else 0.0)
        self.blocks = nn.ModuleList(Block(net, self.pe, i) for i in range(net.n_layers))
        self.norm = stacked.LayerNorm(net.d_model) if form.final_norm else nn.Identity()
        self.head = stacked.Linear(net.d_model, net.vocab_size, bias=form.head_bias)
        init_weights(self, net.n_layers, form)

    @property
    def supports_kv_cache(self) -> bool:
        """True when greedy decoding may feed one token per step (``forward(.., cache=)``): the
        model is causal and its encoding computes the same function from cached keys."""
        return self.dims.causal and self.pe.supports_kv_cache

    @property
    def prefix_only(self) -> bool:
        """True when one forward's output at each position is what a forward of its prefix
        alone gives (an encoder's one pass is its prediction anyway): one teacher-forced pass
        then predicts what greedy decoding predicts."""
        return not self.dims.causal or self.pe.prefix_only

    def new_cache(self, capacity: int) -> KVCache:
        """An empty cache for decoding up to ``capacity`` tokens."""
        if not self.supports_kv_cache:
            raise ValueError(
                f"this model cannot decode with a key/value cache (causal={self.dims.causal}, "
                f"pe={getattr(self.pe, 'pe_name', type(self.pe).__name__)}); feed whole prefixes"
            )
        return KVCache(capacity, self.dims.n_layers)

    def forward(
        self, tokens: Tensor, positions: Tensor | None = None, cache: KVCache | None = None
    ) -> Tensor:
        """``tokens: [b, n]``, optional ``positions: [b|1, n]`` (default 0..n-1; ``[b|1, n, k]``
        for k-D positions) -> logits ``[b, n, vocab]``.

        With a ``cache`` (``new_cache``), ``tokens`` are the next tokens after those already fed
        and ``positions`` theirs (default: continuing ``0, 1, ..``); their keys and values join
        the cache, and the logits are those a full forward over every token fed so far gives at
        the new tokens.
        """
        if cache is not None:
            pos = cache.advance(tokens.shape[1], positions, tokens.device)
        else:
            pos = Positions.of(
                positions, tokens.shape[1], tokens.device, layered=self.layered_positions
            )
        x = self.tok_emb(tokens)
        x = x * self.token_factor if self.token_factor != 1.0 else x
        x = run_blocks(self.pe, self.blocks, x, tokens, pos, cache, None, self.drop_embedded)
        return self.head(self.norm(x))

    def num_params(self) -> dict[str, int]:
        """Total and positional-encoding parameter counts of one member (shared tensors counted
        once)."""
        k = stacked.members_of(self)
        count = lambda module: sum(p.numel() for p in module.parameters()) // k  # noqa: E731
        return {"total": count(self), "pe": count(self.pe)}
