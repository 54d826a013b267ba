"""Positional encodings. Importing this package imports every module in it, which registers
each encoding by name (``@register_pe``): a new encoding is one new module, nothing else."""

import importlib
import pkgutil

from pelab.pe.base import (
    PE_REGISTRY,
    ModelDims,
    NoPE,
    PositionalEncoding,
    get_pe,
    register_pe,
)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "PE_REGISTRY",
    "ModelDims",
    "NoPE",
    "PositionalEncoding",
    "get_pe",
    "register_pe",
]
