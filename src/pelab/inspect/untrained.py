"""Untrained encodings whose learned parameters start constant, and what to draw instead.

T5's bias table starts at zero (pelab's ``t5_bias``, ``t5_bias_2d`` and the bias of ``urpe``),
as do CoPE's position vectors (Golovneva et al. 2024, as in its reference code); URPE's Toeplitz
factors start at one (Luo et al. 2022, the authors' constant init). Such an encoding starts as
NoPE (or as its base encoding): its figures are flat, and say nothing of what it does once
trained. ``pelab.inspect.inspect_pe`` says so, in the console and in the flat figure's title,
and draws beside it the same encoding with *illustrative* values of the parameters that keep it
flat (``illustrated``), titled "illustrative, not trained":

- a T5 bucket table gets ALiBi's slopes (Press et al. 2022) per bucket, ``b_h[k] = -m_h d_k``,
  ``d_k`` the shortest distance ``|j - i|`` in bucket ``k`` (``bucket_distances``): a T5 bias
  that learned ALiBi's penalty. What T5 itself fixes is the bucketing (one value per near
  distance, log-spaced buckets up to ``max_distance``, one value beyond), and a staircase that
  falls with distance shows exactly that; the slopes are an example, not what training finds;
- any other parameter gets its start value plus seeded noise at the fan-in scale,
  ``θ_0 + N(0, 1/fan_in)``: its shape is entirely learned, so random values show only what the
  encoding does with some.

Why illustrate and not show a trained example: a trained bias depends on the task, the seed
and the steps, costs a training run, and pelab ships no checkpoints; an illustration is drawn at
once, names its values, and the trained encoding of any run is one command away
(``ckpt_path=<run dir>/checkpoints/best.ckpt``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

import torch
from torch import Tensor

from pelab.pe.base import PositionalEncoding
from pelab.pe.bias import T5BiasPE, alibi_slopes, t5_bucket
from pelab.pe.t5_bias_2d import T5Bias2dPE

FLAT_TOLERANCE = 1e-6


def is_flat(values: Tensor) -> bool:
    """Whether each head's response ``values[h]`` is one value everywhere: no dependence on
    the distance or offset (infinite entries, masked keys, aside)."""
    for head in values.flatten(1):
        finite = head[head.isfinite()]
        if finite.numel() and (finite - finite[0]).abs().max() > FLAT_TOLERANCE:
            return False
    return True


def constant_parameters(pe: PositionalEncoding) -> dict[str, float]:
    """The learned parameters of ``pe`` that hold one value throughout (as a constant
    initialisation leaves them), by name, with that value."""
    return {
        name: param.flatten()[0].item()
        for name, param in pe.named_parameters()
        if bool((param == param.flatten()[0]).all())
    }


def bucket_distances(num_buckets: int, max_distance: int, bidirectional: bool) -> Tensor:
    """``d_k``: the shortest distance ``|j - i|`` that falls into each of T5's buckets
    (``pelab.pe.bias.t5_bucket``), ``[num_buckets]``."""
    offsets = torch.arange(-2 * max_distance, 2 * max_distance + 1, device="cpu")  # j - i
    buckets = t5_bucket(offsets, bidirectional, num_buckets, max_distance)
    start = torch.full((num_buckets,), 2.0 * max_distance, device="cpu")
    return start.scatter_reduce(0, buckets, offsets.abs().float(), "amin")


def t5_table_owner(pe: PositionalEncoding, name: str) -> T5BiasPE | T5Bias2dPE | None:
    """The T5 bias whose bucket table (an ``nn.Embedding``'s ``weight``) ``name`` is, or None."""
    owner = pe.get_submodule(name.rsplit(".", 2)[0] if name.count(".") >= 2 else "")
    return owner if isinstance(owner, (T5BiasPE, T5Bias2dPE)) else None


def illustrate(pe: PositionalEncoding, name: str, seed: int = 0) -> str:
    """Give ``pe``'s parameter ``name`` its illustrative values, in place; returns them in
    words, for a figure's title."""
    param = pe.get_parameter(name)
    owner = t5_table_owner(pe, name)
    if owner is not None:
        bidirectional = getattr(owner, "bidirectional", True)  # the 2-D tables are, always
        reach = bucket_distances(owner.num_buckets, owner.max_distance, bidirectional)
        param.copy_(-reach[:, None] * alibi_slopes(param.shape[1])[None])
        return f"{name} = -(ALiBi slope of the head) x (shortest distance in the T5 bucket)"
    start, fan_in = param.flatten()[0].item(), param.shape[-1]
    noise = torch.randn(param.shape, generator=torch.Generator().manual_seed(seed), device="cpu")
    param.add_(noise.to(param) * fan_in**-0.5)
    return f"{name} = {start:g} + N(0, 1/{fan_in}), seeded"


def illustrated(pe: PositionalEncoding, names: Iterable[str]) -> tuple[PositionalEncoding, str]:
    """A copy of ``pe`` whose parameters ``names`` hold illustrative values (``illustrate``),
    and what they hold, in words."""
    drawn = copy.deepcopy(pe)
    with torch.no_grad():
        said = [illustrate(drawn, name, seed) for seed, name in enumerate(sorted(names))]
    return drawn, "; ".join(said)
