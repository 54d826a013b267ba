"""The positional-encoding interface, the registry, and explicit positions.

A positional encoding (PE) is one ``nn.Module`` that may act at any of these points; each hook is
an identity here, so an encoding overrides only what its paper changes and attention never asks
which encoding it runs:

============================  ====================================  ============================
where it acts                 families                              hook
============================  ====================================  ============================
token embeddings, once        sinusoidal, learned, ...              ``embed(x, tokens, pos)``
each block's input            FLOATER                               ``layer_input(x, pos, l)``
q and k before the product    RoPE, xPos                            ``transform_qk(q, k, pos)``
logits, content-free          ALiBi, T5 buckets, Kerple, FIRE       ``logit_bias(pos)``
logits, content-dependent     Shaw, Transformer-XL, DeBERTa, CoPE   ``modify_logits(...)``
probabilities after softmax   URPE                                  ``modify_probs(...)``
attention output (values)     Shaw values                           ``modify_output(...)``
============================  ====================================  ============================

Shapes: ``b`` batch, ``h`` heads, ``i``/``j`` query/key index, ``d`` head dim, ``n`` length.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor, nn

from pelab.errors import ConfigError
from pelab.positions import Positions


@dataclass(frozen=True)
class ModelDims:
    """The model facts an encoding may need to build itself."""

    d_model: int
    n_heads: int
    n_layers: int
    causal: bool
    max_len: int  # the longest sequence this run will feed the model (train and eval)
    vocab_size: int = 0  # token ids are 0 .. vocab_size - 1 (0: unknown to the encoding)
    position_dims: int = 1  # coordinates per position the task gives: 1 (sequence), 2 (grid)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


class PositionalEncoding(nn.Module):
    """Base class and null object: every hook is an identity, so this class alone is NoPE.

    Attention decides once, at construction, whether it can use the fused kernel: only when an
    encoding leaves ``modify_logits``, ``modify_probs`` and ``modify_output`` untouched (see
    ``needs_eager_attention``).
    """

    causal_only = False  # True: defined for decoders only; an encoder gets a ConfigError
    position_dims: int | None = 1  # coordinates it reads per position; None: reads no positions
    supports_kv_cache = True  # False: greedy decoding re-runs full forwards (pelab.layouts)

    def __init__(self, dims: ModelDims) -> None:
        super().__init__()
        name = getattr(self, "pe_name", type(self).__name__)
        if self.causal_only and not dims.causal:
            raise ConfigError(
                f"pe={name} is defined for causal models only; use model=decoder, or another "
                "encoding for model=encoder"
            )
        if self.position_dims is not None and self.position_dims != dims.position_dims:
            fitting = sorted(
                n for n, c in PE_REGISTRY.items() if c.position_dims in (None, dims.position_dims)
            )
            raise ConfigError(
                f"pe={name} reads {self.position_dims}-D positions but the task gives "
                f"{dims.position_dims}-D positions; encodings that fit: {', '.join(fitting)}"
            )
        self.dims = dims

    def embed(self, x: Tensor, tokens: Tensor, pos: Positions) -> Tensor:
        """Token embeddings ``x: [b, n, d_model]`` -> same shape."""
        return x

    def layer_input(self, x: Tensor, pos: Positions, layer: int) -> Tensor:
        """The residual stream ``[b, n, d_model]`` entering block ``layer`` (encodings injected at
        every layer, e.g. FLOATER)."""
        return x

    def transform_qk(self, q: Tensor, k: Tensor, pos: Positions) -> tuple[Tensor, Tensor]:
        """Queries and keys ``[b, h, n, d]`` before the dot product."""
        return q, k

    def logit_bias(self, pos: Positions) -> Tensor | None:
        """A content-free additive bias ``[b|1, h|1, i, j]`` on the logits, or None."""
        return None

    def modify_logits(
        self, logits: Tensor, q: Tensor, k: Tensor, pos: Positions, layer: int
    ) -> Tensor:
        """Content-dependent change of the scaled logits ``[b, h, i, j]`` (before masking)."""
        return logits

    def modify_probs(self, probs: Tensor, pos: Positions, layer: int) -> Tensor:
        """Change of the attention probabilities ``[b, h, i, j]``."""
        return probs

    def modify_output(self, out: Tensor, probs: Tensor, pos: Positions, layer: int) -> Tensor:
        """Change of the attention output ``[b, h, i, d]`` (e.g. relative value vectors)."""
        return out

    @classmethod
    def needs_eager_attention(cls) -> bool:
        """True when a hook that the fused attention kernel cannot express is overridden."""
        base = PositionalEncoding
        return any(
            getattr(cls, name) is not getattr(base, name)
            for name in ("modify_logits", "modify_probs", "modify_output")
        )


PE_REGISTRY: dict[str, type[PositionalEncoding]] = {}


def register_pe(name: str) -> Callable[[type[PositionalEncoding]], type[PositionalEncoding]]:
    """Class decorator: make an encoding available as ``pe=<name>``."""

    def add(cls: type[PositionalEncoding]) -> type[PositionalEncoding]:
        if name in PE_REGISTRY:
            raise ValueError(f"positional encoding {name!r} is registered twice")
        PE_REGISTRY[name] = cls
        cls.pe_name = name
        return cls

    return add


def get_pe(name: str) -> type[PositionalEncoding]:
    try:
        return PE_REGISTRY[name]
    except KeyError:
        valid = ", ".join(sorted(PE_REGISTRY))
        raise ConfigError(
            f"unknown positional encoding {name!r}; valid choices: {valid}"
        ) from None


@register_pe("none")
class NoPE(PositionalEncoding):
    """No positional information (NoPE; Kazemnejad et al. 2023, "The Impact of Positional Encoding
    on Length Generalization in Transformers"). A causal mask alone lets a decoder infer position;
    an encoder without positions is permutation-equivariant."""

    position_dims = None
