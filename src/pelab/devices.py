"""Moving what the host made onto the run's device without stalling the host."""

from __future__ import annotations

import torch
from torch import Tensor


def to_device(t: Tensor, device: torch.device | str | None) -> Tensor:
    """``t`` (made on the host, e.g. drawn from a seeded CPU generator) on ``device`` (None: as
    it is). A copy to a CUDA device goes through pinned memory and does not block the host (a
    plain ``.to("cuda")`` from pageable memory waits for the GPU to finish its queue); the
    caching host allocator keeps the pinned buffer until the copy is done."""
    if device is None:
        return t
    device = torch.device(device)
    if device.type == "cuda" and t.device.type == "cpu":
        t = t.pin_memory()
    return t.to(device, non_blocking=True)
