"""What both networks are built from (``NetDims``): the Transformer (decoder or encoder) and the
encoder-decoder take one, and each of their encodings gets the ``ModelDims`` read off it.

The config keeps ``model.net``'s keys flat (``d_model``, ``n_heads``, ..., ``form``: what
records and resumed runs compare key by key); ``pelab.assembly`` adds what the task and the run
fix (``vocab_size``, the lengths, ``position_dims``, ``digit_tokens``) and builds the
``NetDims``. Its fields are the options ``model.net`` takes: ``check_types`` reads them through
the networks' ``configured_by``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pelab.errors import ConfigError, check_choices
from pelab.models.attention import AttnImpl
from pelab.models.form import PELAB, Form
from pelab.models.length_scale import AttnScale
from pelab.pe.base import ModelDims


@dataclass(frozen=True, kw_only=True)
class NetDims:
    """A network's sizes and settings: ``model.net``'s options and what the task fixes.

    Checked on construction: the sizes (``check_sizes``) and the choices (``attn_impl``,
    ``attn_scale``: their ``Literal`` types; ``form``: ``Form``'s). ``d_ff`` left out (None) is
    ``4 * d_model``; ``form`` may be given as ``model.net.form``'s mapping (missing keys:
    pelab's), and is a ``Form`` once built.
    """

    vocab_size: int  # token ids are 0 .. vocab_size - 1 (the task's)
    max_len: int  # the longest sequence the run feeds (training and evaluation)
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2  # of the network; of each stack of an encoder-decoder
    d_ff: int | None = None  # the MLP's width; None: 4 * d_model
    dropout: float = 0.0
    attn_impl: AttnImpl = "auto"  # auto: the fused kernel wherever the encoding allows it
    attn_scale: AttnScale = "none"  # length-scaled attention (pelab.models.length_scale)
    form: Form | Mapping[str, Any] = PELAB  # how the blocks are put together (pelab.models.form)
    position_dims: int = 1  # coordinates per position the task gives: 1, or 2 (a grid)
    train_max_len: int = 0  # the longest training sequence (0: unknown)
    digit_tokens: Sequence[int] = ()  # the task's digit ids (``Task.digit_tokens``)

    def __post_init__(self) -> None:
        check_sizes(self.d_model, self.n_heads, self.n_layers)
        check_choices(NetDims, "model.net", vars(self))
        resolved = {
            "d_ff": self.d_ff or 4 * self.d_model,
            "form": Form.of(self.form),
            "digit_tokens": tuple(self.digit_tokens),
        }
        for name, value in resolved.items():
            object.__setattr__(self, name, value)

    def encoding(self, causal: bool) -> ModelDims:
        """The ``ModelDims`` an encoding of a causal (decoder) or bidirectional stack is built
        with."""
        return ModelDims(
            self.d_model,
            self.n_heads,
            self.n_layers,
            causal,
            self.max_len,
            self.vocab_size,
            self.position_dims,
            self.train_max_len,
            tuple(self.digit_tokens),
        )


def check_sizes(d_model: int, n_heads: int, n_layers: int) -> None:
    """A ``ConfigError`` for sizes no Transformer can have."""
    for name, value in (("d_model", d_model), ("n_heads", n_heads), ("n_layers", n_layers)):
        if value < 1:
            raise ConfigError(f"model.net.{name} must be >= 1, got {value}")
    if d_model % n_heads:
        valid = ", ".join(str(h) for h in range(1, d_model + 1) if d_model % h == 0)
        raise ConfigError(
            f"model.net.d_model={d_model} is not divisible by model.net.n_heads={n_heads}; "
            f"valid model.net.n_heads for d_model={d_model}: {valid}"
        )
