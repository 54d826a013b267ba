"""Composition: several encodings acting as one, each through its own hooks."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from torch import Tensor, nn

from pelab.errors import ConfigError
from pelab.pe.base import (
    SHIFT_CLASSES,
    ModelDims,
    PositionalEncoding,
    class_or_instance_method,
    memo_derived,
)
from pelab.positions import Positions


class ComposedPE(PositionalEncoding):
    """The encodings ``parts`` (name -> factory called with the model's ``ModelDims``) as one.

    Each hook chains the parts in order: ``embed``, ``layer_input``, ``transform_qk`` and the
    ``modify_*`` hooks apply part after part (``h = h_n ∘ … ∘ h_1``); ``logit_bias`` and
    ``input_bias`` are the sums of the parts' biases (None when no part has one); ``normalize`` is
    the one part's that replaces the softmax (two such parts are refused). E.g. URPE on T5 is
    the T5 bias plus a Toeplitz scaling of the probabilities (``pelab.pe.urpe``).

    The composition needs the eager kernel when any part does (``needs_eager_attention``, asked of
    the instance); it is causal-only when any part is, supports a key/value cache when every part
    does, reads the task's positions when any part reads positions, and its ``shift`` class is the
    least invariant of its parts'. Each part checks ``dims`` itself when built; a part's
    ``ConfigError`` names the composition and the part. Parameters live under ``parts.<name>``.
    """

    position_dims = None  # a subclass may declare it; an instance takes it from its parts

    def __init__(
        self, dims: ModelDims, parts: Mapping[str, Callable[[ModelDims], PositionalEncoding]]
    ) -> None:
        super().__init__(dims)
        if not parts:
            raise ConfigError("a composed encoding needs at least one part")
        name = getattr(self, "pe_name", type(self).__name__)
        self.parts = nn.ModuleDict()
        for key, make in parts.items():
            try:
                self.parts[key] = make(dims)
            except ConfigError as error:
                raise ConfigError(f"pe={name} (part {key!r}): {error}") from None
        built = list(self.parts.values())
        self.causal_only = any(part.causal_only for part in built)
        self.supports_kv_cache = all(part.supports_kv_cache for part in built)
        self.prefix_only = all(part.prefix_only for part in built)
        self.members_at_once = all(part.members_at_once for part in built)
        reads = any(part.position_dims is not None for part in built)
        self.position_dims = dims.position_dims if reads else None
        self.shift = max((part.shift for part in built), key=SHIFT_CLASSES.index)
        biased = [key for key, part in self.parts.items() if part.overrides("input_bias")]
        content = [key for key in biased if self.parts[key].scores_content]
        if content and len(biased) > 1:
            raise ConfigError(
                f"pe={name}: part {content[0]!r}'s input_bias is part of the q.k score and "
                f"scales with the logits, the other parts' ({biased}) keep their size: one sum "
                "cannot do both; compose it with encodings without input_bias"
            )
        self.scores_content = bool(content)
        normalizers = [key for key, part in self.parts.items() if part.overrides("normalize")]
        if len(normalizers) > 1:
            raise ConfigError(
                f"pe={name}: parts {normalizers} each replace the softmax (normalize); "
                "a composition can use one"
            )
        self.normalizer = normalizers[0] if normalizers else None  # the part's key

    @class_or_instance_method
    def needs_eager_attention(pe: ComposedPE | type[ComposedPE]) -> bool:
        """Of an instance: whether any part needs it. Of a class (parts unknown): True."""
        if isinstance(pe, type):
            return True
        return any(part.needs_eager_attention() for part in pe.parts.values())

    @class_or_instance_method
    def overrides(pe: ComposedPE | type[ComposedPE], hook: str) -> bool:
        """Of an instance: whether any part replaces ``hook``. Of a class: True."""
        if isinstance(pe, type):
            return True
        return any(part.overrides(hook) for part in pe.parts.values())

    def embed(self, x: Tensor, tokens: Tensor, pos: Positions) -> Tensor:
        for part in self.parts.values():
            x = part.embed(x, tokens, pos)
        return x

    def layer_input(self, x: Tensor, pos: Positions, layer: int) -> Tensor:
        for part in self.parts.values():
            x = part.layer_input(x, pos, layer)
        return x

    def transform_qk(
        self, q: Tensor, k: Tensor, pos: Positions, layer: int
    ) -> tuple[Tensor, Tensor]:
        for part in self.parts.values():
            q, k = part.transform_qk(q, k, pos, layer)
        return q, k

    def logit_bias(self, pos: Positions, layer: int) -> Tensor | None:
        biases = tuple(
            bias
            for bias in (part.logit_bias(pos, layer) for part in self.parts.values())
            if bias is not None
        )
        if len(biases) < 2:
            return biases[0] if biases else None
        # summed once per forward when the parts' biases are shared by the layers
        return memo_derived(pos, (id(self), "bias"), biases, lambda: sum(biases[1:], biases[0]))

    def input_bias(
        self, x: Tensor, q: Tensor, k: Tensor, pos: Positions, layer: int
    ) -> Tensor | None:
        biases = [
            bias
            for bias in (part.input_bias(x, q, k, pos, layer) for part in self.parts.values())
            if bias is not None
        ]
        return sum(biases[1:], biases[0]) if biases else None

    def modify_logits(
        self, logits: Tensor, q: Tensor, k: Tensor, pos: Positions, layer: int
    ) -> Tensor:
        for part in self.parts.values():
            logits = part.modify_logits(logits, q, k, pos, layer)
        return logits

    def normalize(self, logits: Tensor, pos: Positions, layer: int) -> Tensor:
        if self.normalizer is None:
            return super().normalize(logits, pos, layer)
        return self.parts[self.normalizer].normalize(logits, pos, layer)

    def modify_probs(self, probs: Tensor, pos: Positions, layer: int) -> Tensor:
        for part in self.parts.values():
            probs = part.modify_probs(probs, pos, layer)
        return probs

    def modify_output(self, out: Tensor, probs: Tensor, pos: Positions, layer: int) -> Tensor:
        for part in self.parts.values():
            out = part.modify_output(out, probs, pos, layer)
        return out
