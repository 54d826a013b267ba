"""Reading a model's attention maps, on either attention kernel."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from torch import Tensor, nn

from pelab.models.attention import Attention
from pelab.positions import Positions


@contextmanager
def attention_maps(model: nn.Module) -> Iterator[dict[str, list[Tensor]]]:
    """While active, every ``Attention`` in ``model`` records its probabilities.

    Yields ``{module name: [probs, ...]}`` (e.g. ``"blocks.0.attn"``; an encoder–decoder's
    cross-attention too), one ``[b, h, i, j]`` tensor per call of the module, in call order:
    ``softmax(q k^T / sqrt(d) + bias)`` with every encoding hook, after the causal mask and
    ``modify_probs`` and before dropout (``Attention.probabilities``). A module on the fused
    kernel, which never forms them, computes them explicitly meanwhile: its outputs equal the
    fused kernel's up to float rounding. On exit every module gets its kernel back; outside the
    context attention runs as if this module did not exist. The maps keep their autograd graph:
    record under ``torch.no_grad()`` to only read them.
    """
    modules = [(name, m) for name, m in model.named_modules() if isinstance(m, Attention)]
    if not modules:
        raise ValueError(f"{type(model).__name__} has no Attention module to record")
    maps: dict[str, list[Tensor]] = {name: [] for name, _ in modules}
    kernels = [attention.attend for _, attention in modules]
    for name, attention in modules:
        attention.attend = _recording(attention, maps[name])
    try:
        yield maps
    finally:
        for (_, attention), kernel in zip(modules, kernels, strict=True):
            attention.attend = kernel


def _recording(
    attention: Attention, store: list[Tensor]
) -> Callable[[Tensor, Tensor, Tensor, Positions, Tensor | None], Tensor]:
    """``attention``'s explicit kernel, appending its probabilities to ``store``."""

    def attend(q: Tensor, k: Tensor, v: Tensor, pos: Positions, bias: Tensor | None) -> Tensor:
        probs = attention.probabilities(q, k, pos, bias)
        store.append(probs)
        return attention.values(probs, v, pos)

    return attend
