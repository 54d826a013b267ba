"""Each member's running scores over an evaluation epoch (``pelab.lit_module.SequenceModel``'s):
the mean of every metric of a split (``pelab.metrics.SPLIT_METRICS``) at every evaluation
length, kept as torchmetrics states, which move with the module and reduce across devices."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn
from torchmetrics import MeanMetric

from pelab.metrics import SPLIT_METRICS, Scores


class RunningScores(nn.Module):
    """The running means of ``members`` members at ``lengths``; ``update`` adds a batch of
    some members, ``compute`` ends a member's epoch."""

    def __init__(self, members: int, lengths: Sequence[int]) -> None:
        super().__init__()
        metrics = dict.fromkeys(m for split in SPLIT_METRICS.values() for m in split)
        self.states = nn.ModuleList(
            nn.ModuleDict(
                {
                    # scores are never NaN: no check (a host sync) on every update
                    _name(metric, length): MeanMetric(nan_strategy="disable")
                    for metric in metrics
                    for length in lengths
                }
            )
            for _ in range(members)
        )

    def update(self, members: Sequence[int], length: int, values: dict[str, Tensor]) -> None:
        """One batch at ``length``: ``values[metric]`` holds each sequence's value,
        ``[len(members) b]``, member-major."""
        for metric, each in values.items():
            for member, part in zip(members, each.float().chunk(len(members)), strict=True):
                self.states[member][_name(metric, length)].update(part)

    def compute(self, k: int, split: str, lengths: Sequence[int]) -> Scores:
        """Member ``k``'s scores of an epoch of ``split`` at ``lengths``; its running states
        of them reset."""
        scores: Scores = {length: {} for length in lengths}
        for metric in SPLIT_METRICS[split]:
            for length in lengths:
                state = self.states[k][_name(metric, length)]
                scores[length][metric] = float(state.compute())
                state.reset()
        return scores


def _name(metric: str, length: int) -> str:
    """The name of a metric's running state (a ``ModuleDict`` key: no dots or slashes)."""
    return f"{metric}_len{length}"
