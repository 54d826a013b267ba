"""Per-layer schedules: an encoding in some layers, no encoding (NoPE) in the others.

``pe.layers`` names the encoding of each layer, the chosen encoding or ``none``: e.g.
``pe=rope pe.layers=[rope,rope,rope,none]``, RoPE with NoPE in every 4th layer, as in Cohere's
RNoPE (Yang et al. 2025, "Rope to Nope and Back Again: A New Hybrid Attention Strategy"),
Llama 4's iRoPE and SmolLM3. ``pe.nope_temperature`` adds Llama 4's query temperature on the NoPE
layers. A schedule is a composition by layer, not an encoding: it is not registered, and attention
still calls the same hooks (``pelab.pe.base``), which answer as the identity in a NoPE layer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from pelab.errors import ConfigError
from pelab.pe.base import SHIFT_CLASSES, ModelDims, PositionalEncoding, class_or_instance_method
from pelab.positions import Positions

NONE = "none"


class LayeredPE(PositionalEncoding):
    """The encoding ``base`` in the layers where ``layers[l]`` names it, none where it is
    ``"none"``. In a NoPE layer with ``nope_temperature = β > 0`` the queries are scaled as Llama
    4's (``attn_temperature_tuning``; Meta's ``floor_scale`` is ``nope_temperature_length``)::

        q_p <- q_p · (1 + β log(1 + floor((p + 1) / nope_temperature_length)))

    ``p`` the query's position (Llama 4: β = 0.1, length 8192, for contexts far beyond its
    training length; at pelab's lengths a length of 8-16 makes the term act). The base's
    parameters are shared by its layers, as without a schedule. An encoding acting on the token
    embeddings (``embed``) acts before any layer and cannot be scheduled: refused."""

    position_dims = None  # an instance takes these from its base

    def __init__(
        self,
        dims: ModelDims,
        base: Callable[[ModelDims], PositionalEncoding],
        layers: Sequence[str],
        nope_temperature: float = 0.0,
        nope_temperature_length: int = 8192,
    ) -> None:
        super().__init__(dims)
        self.base = base(dims)
        name = getattr(self.base, "pe_name", type(self.base).__name__)
        layers = list(layers)
        if len(layers) != dims.n_layers or set(layers) - {name, NONE}:
            raise ConfigError(
                f"pe.layers={layers} must name the encoding of each of the {dims.n_layers} layers "
                f"(model.net.n_layers), each {name!r} or {NONE!r}, e.g. "
                f"[{','.join([name] * (dims.n_layers - 1) + [NONE])}]"
            )
        if self.base.overrides("embed"):
            raise ConfigError(
                f"pe.layers: pe={name} acts on the token embeddings, once before the first layer, "
                "so no layer can go without it; schedules take encodings that act in attention "
                "or at each layer's input"
            )
        if nope_temperature < 0 or nope_temperature_length < 1:
            raise ConfigError(
                f"pe.nope_temperature={nope_temperature} must be >= 0 and "
                f"pe.nope_temperature_length={nope_temperature_length} >= 1"
            )
        if nope_temperature and NONE not in layers:
            raise ConfigError(
                f"pe.nope_temperature={nope_temperature} scales the queries of NoPE layers, but "
                f"pe.layers={layers} has none"
            )
        self.active = tuple(layer == name for layer in layers)
        self.nope_temperature = nope_temperature
        self.nope_temperature_length = nope_temperature_length
        self.pe_name = name
        self.causal_only = self.base.causal_only
        self.supports_kv_cache = self.base.supports_kv_cache
        self.prefix_only = self.base.prefix_only
        self.members_at_once = self.base.members_at_once
        self.needs_digit_tokens = self.base.needs_digit_tokens
        self.position_dims = dims.position_dims if nope_temperature else self.base.position_dims
        own = "absolute" if nope_temperature else "relative"  # the temperature reads positions
        self.shift = max(self.base.shift, own, key=SHIFT_CLASSES.index)

    @class_or_instance_method
    def needs_eager_attention(pe: LayeredPE | type[LayeredPE]) -> bool:
        """As its base (a NoPE layer computes the same on either kernel)."""
        return True if isinstance(pe, type) else pe.base.needs_eager_attention()

    @class_or_instance_method
    def overrides(pe: LayeredPE | type[LayeredPE], hook: str) -> bool:
        return True if isinstance(pe, type) else pe.base.overrides(hook)

    def layer_input(self, x: Tensor, pos: Positions, layer: int) -> Tensor:
        return self.base.layer_input(x, pos, layer) if self.active[layer] else x

    def transform_qk(
        self, q: Tensor, k: Tensor, pos: Positions, layer: int
    ) -> tuple[Tensor, Tensor]:
        if self.active[layer]:
            return self.base.transform_qk(q, k, pos, layer)
        if not self.nope_temperature:
            return q, k
        # [b|1, i] -> [b|1, 1, i, 1]
        steps = torch.floor((pos.q.float() + 1) / self.nope_temperature_length)
        scale = 1 + self.nope_temperature * torch.log1p(steps)
        return q * scale[:, None, :, None].to(q.dtype), k

    def logit_bias(self, pos: Positions, layer: int) -> Tensor | None:
        return self.base.logit_bias(pos, layer) if self.active[layer] else None

    def input_bias(
        self, x: Tensor, q: Tensor, k: Tensor, pos: Positions, layer: int
    ) -> Tensor | None:
        return self.base.input_bias(x, q, k, pos, layer) if self.active[layer] else None

    def modify_logits(
        self, logits: Tensor, q: Tensor, k: Tensor, pos: Positions, layer: int
    ) -> Tensor:
        return self.base.modify_logits(logits, q, k, pos, layer) if self.active[layer] else logits

    def normalize(self, logits: Tensor, pos: Positions, layer: int) -> Tensor:
        if self.active[layer]:
            return self.base.normalize(logits, pos, layer)
        return super().normalize(logits, pos, layer)

    def modify_probs(self, probs: Tensor, pos: Positions, layer: int) -> Tensor:
        return self.base.modify_probs(probs, pos, layer) if self.active[layer] else probs

    def modify_output(self, out: Tensor, probs: Tensor, pos: Positions, layer: int) -> Tensor:
        return self.base.modify_output(out, probs, pos, layer) if self.active[layer] else out


def scheduled(
    base: Callable[[ModelDims], PositionalEncoding],
    layers: Sequence[str] | None = None,
    nope_temperature: float = 0.0,
    nope_temperature_length: int = 8192,
) -> Callable[[ModelDims], PositionalEncoding]:
    """The encoding factory of a run: ``base`` itself without a schedule (``layers`` None, so a
    run without one builds, trains and checkpoints exactly as before schedules existed), else a
    ``LayeredPE`` of it."""
    if layers is None:
        if nope_temperature:
            raise ConfigError(
                f"pe.nope_temperature={nope_temperature} scales the queries of NoPE layers; "
                "set pe.layers too, e.g. pe.layers=[rope,rope,rope,none]"
            )
        return base

    def build(dims: ModelDims) -> LayeredPE:
        return LayeredPE(dims, base, layers, nope_temperature, nope_temperature_length)

    return build
