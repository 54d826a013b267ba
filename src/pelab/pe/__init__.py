"""Positional encodings. Importing this package registers every encoding by name."""

from pelab.pe import absolute, bias, rotary  # noqa: F401  (registration side effect)
from pelab.pe.base import (
    PE_REGISTRY,
    ConfigError,
    ModelDims,
    NoPE,
    PositionalEncoding,
    Positions,
    get_pe,
    register_pe,
)

__all__ = [
    "PE_REGISTRY",
    "ConfigError",
    "ModelDims",
    "NoPE",
    "PositionalEncoding",
    "Positions",
    "get_pe",
    "register_pe",
]
