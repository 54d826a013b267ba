"""``model.compile=true``: the training forward through ``torch.compile``, eager where compiling
fails."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

log = logging.getLogger(__name__)


class CompiledOrEager:
    """``torch.compile(fn)``, falling back to ``fn`` itself, with one warning, the first time
    compiling fails (e.g. TorchInductor's ``CppCompileError`` when the machine's compiler cannot
    build the generated kernel): the run goes on eagerly, with the same function. An error of
    ``fn`` itself is raised again by the eager call. ``failed`` holds the compile error."""

    def __init__(self, fn: Callable[..., Tensor]) -> None:
        self.fn, self.compiled = fn, torch.compile(fn)
        self.failed: str | None = None

    def __call__(self, *args: Any) -> Tensor:
        if self.failed is None:
            try:
                return self.compiled(*args)
            except Exception as error:  # compiling failed: torch.compile has no narrower type
                self.failed = f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
                log.warning(
                    "model.compile=true: torch.compile failed (%s); training goes on without "
                    "compiling (set model.compile=false to skip the attempt)",
                    self.failed,
                )
        return self.fn(*args)
