"""The positional-encoding interface, the registry, and explicit positions.

A positional encoding (PE) is one ``nn.Module`` that may act at any of these points; each hook is
an identity here, so an encoding overrides only what its paper changes and attention never asks
which encoding it runs:

============================  ====================================  ============================
where it acts                 families                              hook
============================  ====================================  ============================
token embeddings, once        sinusoidal, learned, ...              ``embed(x, tokens, pos)``
each block's input            FLOATER                               ``layer_input(x, pos, l)``
q and k before the product    RoPE, xPos                            ``transform_qk(q, k, pos, l)``
logits, content-free          ALiBi, T5 buckets, Kerple, FIRE       ``logit_bias(pos, l)``
logits, from the layer input  FoX, PaTH                             ``input_bias(x, q, k, pos, l)``
logits, content-dependent     Shaw, Transformer-XL, DeBERTa, CoPE   ``modify_logits(...)``
logits -> weights (softmax)   stick-breaking                        ``normalize(...)``
probabilities after softmax   URPE                                  ``modify_probs(...)``
attention output (values)     Shaw values                           ``modify_output(...)``
============================  ====================================  ============================

An encoding also declares its ``shift`` class (``SHIFT_CLASSES``), what shifting every position
by the same offset does to it; the contract tests check each class's promise. Several encodings act
as one through ``pelab.pe.composed.ComposedPE``.

Shapes: ``b`` batch, ``h`` heads, ``i``/``j`` query/key index, ``d`` head dim, ``n`` length.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import torch
from torch import Tensor, nn

from pelab.errors import ConfigError, choices_checked, not_a_choice
from pelab.positions import Positions

# What shifting all positions by the same offset (in every axis, for k-D positions) does to an
# encoding's outputs, from most to least invariant:
SHIFT_CLASSES = (
    "relative",  # nothing: it reads only differences of positions, or no positions at all
    "relative_below_threshold",  # nothing while every position stays below a (learned) threshold
    "absolute",  # the model sees the shift
)
# the fused kernel has no room for these (an additive bias, ``logit_bias`` or ``input_bias``, it
# takes as its mask)
EAGER_HOOKS = ("modify_logits", "normalize", "modify_probs", "modify_output")

T = TypeVar("T")


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
    # the longest sequence seen in training (BOS + prompt + SEP + answer at the longest training
    # length); 0 when unknown. Context-length scalings (RoPE's pe.scaling) read it.
    train_max_len: int = 0
    # the token ids that are digits of numbers (the task's ``Task.digit_tokens``); () when the
    # task has none. Encodings that index digits within numbers (Abacus) read it.
    digit_tokens: tuple[int, ...] = ()

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


class class_or_instance_method:
    """A method bound to the instance when called on one, to the class when called on the class."""

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func

    def __get__(self, obj: object, owner: type) -> Callable[..., Any]:
        return self.func.__get__(owner if obj is None else obj, owner)


class PositionalEncoding(nn.Module):
    """Base class and null object: every hook is an identity, so this class alone is NoPE.

    Attention decides once, at construction, whether it can use the fused kernel: only when an
    encoding leaves every hook of ``EAGER_HOOKS`` untouched (see ``needs_eager_attention``).
    """

    causal_only = False  # True: defined for decoders only; an encoder gets a ConfigError
    position_dims: int | None = 1  # coordinates it reads per position; None: reads no positions
    supports_kv_cache = True  # False: greedy decoding re-runs full forwards (pelab.model_kinds)
    # False: in a causal model an output depends on the whole sequence, not only on its prefix
    # (RoPE's length-dependent scalings), so one teacher-forced pass does not predict what
    # greedy decoding predicts: validation then decodes its exact match (``SequenceModel``)
    prefix_only = True
    needs_digit_tokens = False  # True: reads ModelDims.digit_tokens; a model without gets an error
    # True: ``input_bias`` is part of the q.k score (PaTH's q^T (H...H - I) k), so a length scale
    # (model.net.attn_scale) scales it with the logits. False: an additive bias that keeps its
    # size, computed from q as it leaves ``transform_qk``, before the length scale (GRAPE-A)
    scores_content = False
    # True: the members of a stack run its hooks at once (``torch.func.vmap`` over their stacked
    # parameters, ``pelab.models.member_encodings``). False: one member after another, for
    # an encoding whose hooks read a value of its parameters on the host or draw random numbers
    members_at_once = True
    adds_to_tokens = False  # True: ``embed`` adds a position vector to the tokens (``AdditivePE``)
    shift: ClassVar[str]  # one of SHIFT_CLASSES, declared by every registered encoding

    def __init__(self, dims: ModelDims) -> None:
        super().__init__()
        name = getattr(self, "pe_name", type(self).__name__)
        if self.causal_only and not dims.causal:
            raise ConfigError(
                f"pe={name} is defined for causal models only; use model=decoder, or another "
                "encoding for model=encoder"
            )
        if self.needs_digit_tokens and not dims.digit_tokens:
            raise ConfigError(
                f"pe={name} reads where the digits of numbers are, but this model was given no "
                "digit tokens (ModelDims.digit_tokens, from the task's Task.digit_tokens): use a "
                "task with numbers, e.g. task=addition"
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

    @torch.no_grad()
    def constrain(self) -> None:
        """Put the parameters into their valid range, in place, before a forward reads them
        (Kerple's clamp: projected gradient descent). The network calls it once per forward,
        before any hook (``pelab.models.transformer.run_blocks``), so the hooks stay pure
        functions of the parameters (``pelab.models.stacked`` runs them under ``vmap``). Here:
        the encodings inside this one (a composition's parts, DAPE's base) constrain theirs."""
        for module in self.modules():
            if module is self or not isinstance(module, PositionalEncoding):
                continue
            if type(module).constrain is not PositionalEncoding.constrain:
                module.constrain()

    def embed(self, x: Tensor, tokens: Tensor, pos: Positions) -> Tensor:
        """Token embeddings ``x: [b, n, d_model]`` -> same shape."""
        return x

    def layer_input(self, x: Tensor, pos: Positions, layer: int) -> Tensor:
        """The residual stream ``[b, n, d_model]`` entering block ``layer`` (encodings injected at
        every layer, e.g. FLOATER)."""
        return x

    def transform_qk(
        self, q: Tensor, k: Tensor, pos: Positions, layer: int
    ) -> tuple[Tensor, Tensor]:
        """Queries and keys ``[b, h, n, d]`` before the dot product."""
        return q, k

    def logit_bias(self, pos: Positions, layer: int) -> Tensor | None:
        """A content-free additive bias ``[b|1, h|1, i, j]`` on the logits of block ``layer``, or
        None. An encoding that memoises it (``pos.memo``) keys the memo by ``layer`` when the bias
        depends on it."""
        return None

    def input_bias(
        self, x: Tensor, q: Tensor, k: Tensor, pos: Positions, layer: int
    ) -> Tensor | None:
        """An additive bias ``[b, h|1, i, j]`` on the logits of block ``layer`` computed from that
        block's attention input ``x: [b, i, d_model]`` (the normed residual stream) and its
        queries and keys ``[b, h, n, d]`` (after ``transform_qk``), or None: data-dependent
        encodings such as FoX's forget gates and PaTH's Householder products. Added to
        ``logit_bias``; the fused kernel takes the sum as its mask. With a key/value cache ``x``
        holds only the new tokens, so an encoding that needs the earlier ones declares
        ``supports_kv_cache = False``."""
        return None

    def modify_logits(
        self, logits: Tensor, q: Tensor, k: Tensor, pos: Positions, layer: int
    ) -> Tensor:
        """Content-dependent change of the scaled logits ``[b, h, i, j]`` (before masking)."""
        return logits

    def normalize(self, logits: Tensor, pos: Positions, layer: int) -> Tensor:
        """The attention weights ``[b, h, i, j]`` of the masked logits (a masked entry is
        ``-inf``; the query rows are the last ``i`` of the ``j`` keys): a softmax over the keys,
        unless an encoding replaces it (stick-breaking attention)."""
        return logits.softmax(dim=-1)

    def modify_probs(self, probs: Tensor, pos: Positions, layer: int) -> Tensor:
        """Change of the attention probabilities ``[b, h, i, j]``."""
        return probs

    def modify_output(self, out: Tensor, probs: Tensor, pos: Positions, layer: int) -> Tensor:
        """Change of the attention output ``[b, h, i, d]`` (e.g. relative value vectors)."""
        return out

    @class_or_instance_method
    def needs_eager_attention(pe: PositionalEncoding | type[PositionalEncoding]) -> bool:
        """True when a hook that the fused attention kernel cannot express (``EAGER_HOOKS``) is
        overridden. Asked of a class (the registry) or an instance (attention; a composition
        answers from its parts)."""
        cls = pe if isinstance(pe, type) else type(pe)
        return any(cls.overrides(name) for name in EAGER_HOOKS)

    @class_or_instance_method
    def overrides(pe: PositionalEncoding | type[PositionalEncoding], hook: str) -> bool:
        """Whether this class replaces ``hook``, the identity of ``PositionalEncoding`` (a
        composition's instance answers from its parts)."""
        cls = pe if isinstance(pe, type) else type(pe)
        return getattr(cls, hook) is not getattr(PositionalEncoding, hook)


PE_REGISTRY: dict[str, type[PositionalEncoding]] = {}


def register_pe(name: str) -> Callable[[type[PositionalEncoding]], type[PositionalEncoding]]:
    """Class decorator: make an encoding available as ``pe=<name>``; its constructor refuses a
    value that an option's ``Literal`` type does not list (``choices_checked``)."""

    def add(cls: type[PositionalEncoding]) -> type[PositionalEncoding]:
        if name in PE_REGISTRY:
            raise ValueError(f"positional encoding {name!r} is registered twice")
        if getattr(cls, "shift", None) not in SHIFT_CLASSES:
            raise ValueError(
                f"positional encoding {name!r} declares shift={getattr(cls, 'shift', None)!r}; "
                f"every encoding declares one of {SHIFT_CLASSES}"
            )
        PE_REGISTRY[name] = cls
        cls.pe_name = name
        if "__init__" in vars(cls):
            cls.__init__ = choices_checked("pe")(cls.__init__)
        return cls

    return add


def get_pe(name: str) -> type[PositionalEncoding]:
    try:
        return PE_REGISTRY[name]
    except KeyError:
        raise not_a_choice("pe", name, sorted(PE_REGISTRY)) from None


@register_pe("none")
class NoPE(PositionalEncoding):
    """No positional information (NoPE; Kazemnejad et al. 2023, "The Impact of Positional Encoding
    on Length Generalization in Transformers"). A causal mask alone lets a decoder infer position;
    an encoder without positions is permutation-equivariant."""

    position_dims = None
    shift = "relative"


def memo_derived(
    pos: Positions, tag: Any, sources: tuple[Tensor | None, ...], compute: Callable[[], Tensor]
) -> Tensor:
    """``pos.memo`` for a tensor derived from ``sources`` (e.g. a bias with the causal mask): once
    per forward for the same source tensors (a bias all layers share), afresh for new ones (a
    per-layer bias). The memo keeps the sources alive, so no other tensor can take their ``id``
    while ``pos`` lives."""
    return pos.memo((tag, *map(id, sources)), lambda: (sources, compute()))[1]


def in_fp32(compute: Callable[..., T], *inputs: Tensor) -> T:
    """``compute(*inputs)`` in at least float32 whatever autocast and TF32 are doing: ``compute``
    gets each input as float32 (a float64 one, a numerical check's, stays float64) and runs with
    autocast off on the inputs' device, so its matmuls (``nn.Linear``, ``bmm``) keep float32
    instead of rounding to bf16 under ``trainer.precision=bf16-mixed``, and on CUDA with full
    float32 matmuls (``ieee_matmuls``: no TF32, which ``train.py``'s matmul precision ``high``
    allows elsewhere; TF32 keeps 10 mantissa bits, so e.g. FIRE's log distances merge from
    about 544 tokens). Encodings run their position biases, their small networks and their sums
    through it. Without autocast and with float32 inputs it is ``compute(*inputs)`` bit for
    bit. (A device autocast does not know, such as ``meta``, has nothing to turn off.)"""
    device = inputs[0].device.type
    autocast = torch.amp.is_autocast_available(device)
    with torch.autocast(device, enabled=False) if autocast else contextlib.nullcontext():
        with ieee_matmuls(device):
            return compute(*(x.to(torch.promote_types(x.dtype, torch.float32)) for x in inputs))


@contextlib.contextmanager
def ieee_matmuls(device: str):
    """Within: float32 matmuls in full float32 on CUDA (matmul precision ``highest``), restored
    after. Elsewhere nothing changes (on the CPU ``high`` already is full float32)."""
    if device != "cuda":
        yield
        return
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)
