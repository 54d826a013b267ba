"""RoPE's context-length scalings (``pe.scaling``): each only changes *which frequencies* RoPE
uses (and, for YaRN, a temperature on q and k), so each is a record of ``RotaryScaling`` that
``pelab.pe.rotary.RotaryPE`` reads, not a module: position interpolation (``linear``), NTK-aware
(``ntk``), dynamic NTK (``dynamic_ntk``) and YaRN (``yarn``, as the paper writes its ramp;
``yarn_reference``, as the reference code computes it)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class ScalingInput:
    """What a strategy reads in one forward pass."""

    inv_freq: Tensor  # the unscaled theta_i = base^(-2i/r), [r/2]
    rot_dim: int  # r
    base: float
    factor: float  # s >= 1
    original_max_len: int | None  # L, the training length (None: unknown)
    current_len: int | None  # the largest position + 1 of this pass (None unless length_dependent)


def unit_scale(factor: float) -> float:
    return 1.0


@dataclass(frozen=True)
class RotaryScaling:
    """A context-length scaling strategy (``pe.scaling``): the frequencies RoPE uses instead of
    ``theta_i``, and a scale ``qk_scale(s)`` on both q and k (the logits get its square)."""

    name: str
    frequencies: Callable[[ScalingInput], Tensor]  # -> [r/2]
    qk_scale: Callable[[float], float] = unit_scale
    uses_factor: bool = True  # False: pe.scaling_factor must stay 1
    needs_original_max_len: bool = False
    length_dependent: bool = False  # follows the current length: cached keys go stale, no cache
    min_rot_dim: int = 2  # fewest rotated dims r the formula is defined for


def no_scaling(x: ScalingInput) -> Tensor:
    return x.inv_freq


def linear_scaling(x: ScalingInput) -> Tensor:
    """Position interpolation (Chen et al. 2023, "Extending Context Window of Large Language
    Models via Positional Interpolation"): ``m -> m / s``, i.e. every ``theta_i / s``."""
    return x.inv_freq / x.factor


def ntk_frequencies(rot_dim: int, base: float, factor: float) -> Tensor:
    """NTK-aware scaling (bloc97 2023; Peng et al. 2023, section 3.1): keep the formula, raise the
    base, ``base' = base * s^(r / (r - 2))``: the highest frequency is unchanged and the lowest is
    divided by exactly ``s``. Needs ``r >= 4``."""
    new_base = base * factor ** (rot_dim / (rot_dim - 2))
    # on the host, as the unscaled frequencies are made; the callers move them to the device
    pairs = torch.arange(0, rot_dim, 2, dtype=torch.float32, device="cpu")
    return new_base ** (-pairs / rot_dim)


def ntk_scaling(x: ScalingInput) -> Tensor:
    return ntk_frequencies(x.rot_dim, x.base, x.factor).to(x.inv_freq.device)


def dynamic_ntk_scaling(x: ScalingInput) -> Tensor:
    """Dynamic NTK (emozilla 2023; Peng et al. 2023, section 3.3): no change up to
    ``original_max_len = L``; beyond it, NTK-aware with ``s' = s * n / L - (s - 1)`` for the
    current length ``n``: continuous at ``n = L``, and ``s = 1`` gives Peng et al.'s
    ``s' = n / L``."""
    if x.current_len <= x.original_max_len:
        return x.inv_freq
    grown = x.factor * x.current_len / x.original_max_len - (x.factor - 1)
    return ntk_frequencies(x.rot_dim, x.base, grown).to(x.inv_freq.device)


YARN_ALPHA, YARN_BETA = 1.0, 32.0  # Peng et al. 2023, section 3.2 (their values for Llama)


def yarn_scaling(x: ScalingInput) -> Tensor:
    """YaRN (Peng et al. 2023, "YaRN: Efficient Context Window Extension of Large Language
    Models"), NTK-by-parts (with ``yarn_temperature``).

    Dim ``i`` turns ``r_i = L / lambda_i`` times within ``L = original_max_len``, with wavelength
    ``lambda_i = 2 pi / theta_i``. Ramp ``gamma = clamp((r_i - alpha) / (beta - alpha), 0, 1)``,
    ``alpha = 1``, ``beta = 32`` (rotation counts, not wavelengths); ``theta_i' = (1 - gamma)
    theta_i / s + gamma theta_i``: dims that turn more than beta times keep their frequency,
    those turning less than once are interpolated by ``s``. The ramp is linear in the rotation
    count, as the paper writes it; ``yarn_reference`` is the reference code's ramp.
    """
    turns = x.original_max_len * x.inv_freq / (2 * math.pi)  # r_i = L / lambda_i
    gamma = ((turns - YARN_ALPHA) / (YARN_BETA - YARN_ALPHA)).clamp(0.0, 1.0)
    return (1 - gamma) * x.inv_freq / x.factor + gamma * x.inv_freq


def yarn_reference_scaling(x: ScalingInput) -> Tensor:
    """YaRN as HF transformers (``_compute_yarn_parameters``) and the authors' code compute it:
    the ramp is linear in the pair index ``i``, not in the rotation count. ``alpha``, ``beta``
    rotations become the pair indices where a dim turns that often within ``L``,
    ``i(rot) = r ln(L / (2 pi rot)) / (2 ln base)``, rounded outwards (``floor`` at ``beta``,
    ``ceil`` at ``alpha``; clipped to ``[0, r - 1]``); pairs below ``i(beta)`` keep ``theta_i``,
    those above ``i(alpha)`` get ``theta_i / s``, linearly between. Inside the ramp the two
    variants differ (at toy lengths by up to half of ``theta_i``)."""

    def pair_turning(rotations: float) -> float:
        turns = x.original_max_len / (rotations * 2 * math.pi)
        return x.rot_dim * math.log(turns) / (2 * math.log(x.base))

    low = max(math.floor(pair_turning(YARN_BETA)), 0)
    high = min(math.ceil(pair_turning(YARN_ALPHA)), x.rot_dim - 1)
    high = high + 0.001 if high == low else high
    index = torch.arange(x.inv_freq.numel(), dtype=torch.float32, device=x.inv_freq.device)
    keep = 1 - ((index - low) / (high - low)).clamp(0.0, 1.0)
    return (1 - keep) * x.inv_freq / x.factor + keep * x.inv_freq


def yarn_temperature(factor: float) -> float:
    """YaRN's attention temperature (Peng et al. 2023, section 3.4): ``sqrt(1/t) = 0.1 ln(s) + 1``
    multiplies q and k."""
    return 0.1 * math.log(factor) + 1.0


SCALINGS: dict[str, RotaryScaling] = {
    s.name: s
    for s in (
        RotaryScaling("none", no_scaling, uses_factor=False),
        RotaryScaling("linear", linear_scaling),
        RotaryScaling("ntk", ntk_scaling, min_rot_dim=4),  # base * s^(r / (r - 2))
        RotaryScaling(
            "dynamic_ntk",
            dynamic_ntk_scaling,
            needs_original_max_len=True,
            length_dependent=True,
            min_rot_dim=4,  # as ntk
        ),
        RotaryScaling("yarn", yarn_scaling, yarn_temperature, needs_original_max_len=True),
        RotaryScaling(
            "yarn_reference",
            yarn_reference_scaling,
            yarn_temperature,
            needs_original_max_len=True,
        ),
    )
}
