"""How a Transformer is put together beyond its sizes (``model.net.form``): pelab's defaults, or
the network of DeepMind's randomized_positional_encodings code (Ruoss et al. 2023, the RPE
paper; ``model=encoder_rpe``), so that a peer's protocol can be matched exactly.

=============  ===========================================  =================================
key            pelab (default)                              the RPE code
=============  ===========================================  =================================
norm           pre: ``x + f(LN(x))``                        post: ``LN(x + f(x))``
final_norm     true: ``LN`` before the head                 false
activation     gelu                                         relu
head_bias      false                                        true
init           gpt2: ``N(0, 0.02)``, residual outputs       haiku: ``TN(0, 1/fan_in)``, biases
               ``/ sqrt(2 L)``                              0 (``hk.Linear``'s default)
embedding      table: a lookup table, ``N(0, 1)``           rpe: ``sqrt(d_model) E[t]``, ``E``
                                                            from ``TN(0, 0.02^2)``; dropout on
                                                            tokens + positions
attention_     true: ``model.net.dropout`` on the           false: dropout only after the
dropout        attention probabilities too                  attention and the MLP
=============  ===========================================  =================================

``TN``: a normal truncated at two standard deviations (``hk.initializers.TruncatedNormal``).
The RPE code embeds a one-hot vector by a bias-free ``hk.Linear`` with that start, which is the
table lookup ``E[t]``; it applies dropout to the sum only where an encoding adds one there
(sin/cos, learned): pelab's ``AdditivePE`` (``PositionalEncoding.adds_to_tokens``).
"""

from __future__ import annotations

import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from torch import nn

from pelab.errors import ConfigError, not_a_choice
from pelab.pe.base import PositionalEncoding

ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU}
RPE_EMBEDDING_STD = 0.02  # the RPE code's emb_init_scale


@dataclass(frozen=True)
class Form:
    """``model.net.form``: see the module docstring; every field is checked against its type's
    choices (``choices``)."""

    norm: Literal["pre", "post"] = "pre"
    final_norm: bool = True
    activation: Literal["gelu", "relu"] = "gelu"
    head_bias: bool = False
    init: Literal["gpt2", "haiku"] = "gpt2"
    embedding: Literal["table", "rpe"] = "table"
    attention_dropout: bool = True

    @staticmethod
    def choices() -> dict[str, tuple[Any, ...]]:
        """Each field's valid values, read off its type."""
        hints = typing.get_type_hints(Form)
        return {f.name: typing.get_args(hints[f.name]) or (True, False) for f in fields(Form)}

    def __post_init__(self) -> None:
        for name, valid in self.choices().items():
            value = getattr(self, name)
            if value not in valid or type(value) is not type(valid[0]):
                raise not_a_choice(f"model.net.form.{name}", value, valid)

    @classmethod
    def of(cls, form: Form | Mapping[str, Any] | None) -> Form:
        """A ``Form`` from a config mapping (``model.net.form``; missing keys: pelab's)."""
        if form is None or isinstance(form, Form):
            return form or cls()
        unknown = sorted(set(form) - {f.name for f in fields(cls)})
        if unknown:
            raise ConfigError(
                f"model.net.form has no key {unknown[0]!r}; valid keys: {list(cls.choices())}"
            )
        return cls(**form)

    def token_factor(self, d_model: int) -> float:
        """The factor on token embeddings: ``sqrt(d_model)`` for ``embedding=rpe``, else 1."""
        return math.sqrt(d_model) if self.embedding == "rpe" else 1.0

    def drops_embeddings(self, pe: PositionalEncoding) -> bool:
        """Whether dropout follows the embedding: the RPE code's, where ``pe`` adds a position
        vector to the tokens."""
        return self.embedding == "rpe" and pe.adds_to_tokens

    def check_encoding(self, pe: PositionalEncoding) -> None:
        """A ``ConfigError`` where the encoding would scale the tokens a second time."""
        if self.embedding == "rpe" and getattr(pe, "token_scale", "none") != "none":
            raise ConfigError(
                f"model.net.form.embedding=rpe already multiplies the tokens by sqrt(d_model); "
                f"pe.token_scale={pe.token_scale} would do it twice: set pe.token_scale=none"
            )


PELAB = Form()  # the default form


def init_weights(model: nn.Module, n_layers: int, form: Form) -> None:
    """Every matrix but the encodings' (which initialise their own parameters, as their papers
    do). Matrices are ``[K, out, in]`` (``pelab.models.stacked``), built with K = 1.

    ``gpt2`` (GPT-2's): ``N(0, 0.02)`` with the residual output projections scaled by
    ``1 / sqrt(2 n_layers)``; biases and the token table keep their start (``torch.nn``'s).
    ``haiku`` (``hk.Linear``'s default): ``TN(0, 1/fan_in)`` truncated at two standard
    deviations, biases 0. ``embedding=rpe``: the token table from ``TN(0, 0.02^2)``.
    """
    encoding_params = {
        id(p) for m in model.modules() if isinstance(m, PositionalEncoding) for p in m.parameters()
    }
    for name, p in model.named_parameters():
        if id(p) in encoding_params:
            continue
        if name.endswith("tok_emb.weight"):
            if form.embedding == "rpe":
                truncated_normal(p, RPE_EMBEDDING_STD)
            continue
        if p.dim() == 3 and form.init == "gpt2":
            residual = name.endswith(("proj.weight", "net.2.weight"))
            nn.init.normal_(p, std=0.02 / (2 * n_layers) ** 0.5 if residual else 0.02)
        elif p.dim() == 3:
            truncated_normal(p, p.shape[-1] ** -0.5)
        elif form.init == "haiku" and name.endswith(".bias"):
            nn.init.zeros_(p)  # (a LayerNorm's starts at 0 anyway)


def truncated_normal(p: nn.Parameter, std: float) -> None:
    """``N(0, std^2)`` truncated at ``+-2 std`` (haiku's ``TruncatedNormal(std)``: its spread is
    0.88 std)."""
    nn.init.trunc_normal_(p, std=std, a=-2 * std, b=2 * std)
