"""One member of a stack, in one home (``pelab.lit_module.SequenceModel.members[k]``): what the
member is (its seed and learning rate) and what its training has made of it (stopped, the step
its decay began, its last scores, its buffered history), with the one state dict a checkpoint
carries of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pelab.metrics import Scores
from pelab.reliability.resume.checkpoints import ENGINE, ENGINE_KEY, MEMBERS_KEY, SCORES_KEY

History = list[tuple[int, dict[str, float]]]  # (step, {logger key: value}) per logged step


@dataclass
class MemberState:
    """Member ``k`` of a stack of K >= 1 (a plain run is K = 1).

    ``seed`` and ``learning_rate`` (None: the optimizer's own) make it; ``stopped``: it has
    learned (``pelab.competence.LearnedStop``), its weights are held and it leaves the forward;
    ``decay_from``: the step its ``decay_at`` decay began (None before); ``scores[split]``: its
    last ``{length: {metric: value}}`` of each split; ``history``: what its own loggers get once
    a stack's training ends (``pelab.member_log``)."""

    seed: int
    learning_rate: float | None = None
    stopped: bool = False
    decay_from: int | None = None
    scores: dict[str, Scores] = field(default_factory=dict)
    history: History = field(default_factory=list)

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint carries beside the weights: the training's part (the config makes
        the rest) and the last validation's scores, so a run resumed at its final step (killed
        during its test) records them without a validation left to run."""
        return {
            "stopped": self.stopped,
            "decay_from": self.decay_from,
            "history": self.history,
            "val": self.scores.get("val"),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stopped = bool(state["stopped"])
        self.decay_from = state.get("decay_from")
        self.history = [(step, dict(values)) for step, values in state["history"]]
        val = state.get("val")
        if val is not None and "val" not in self.scores:  # never over this run's own
            self.scores["val"] = {int(n): dict(v) for n, v in val.items()}


def save_members(checkpoint: dict[str, Any], members: list[MemberState]) -> None:
    """The engine's version and each member's ``state_dict`` go with the stack's weights."""
    checkpoint[ENGINE_KEY] = ENGINE
    checkpoint[MEMBERS_KEY] = [member.state_dict() for member in members]


def restore_members(checkpoint: dict[str, Any], members: list[MemberState]) -> None:
    """Each member's state from a checkpoint of the same stack (``save_members``'), or of one
    written before the members had one home (2026-11-29: per-field lists under
    ``MEMBERS_KEY``, scores under ``SCORES_KEY``); a checkpoint of another member count
    restores nothing."""
    saved = checkpoint.get(MEMBERS_KEY)
    if isinstance(saved, dict):  # the per-field format
        scores = checkpoint.get(SCORES_KEY) or []
        scores += [{}] * (len(saved["stopped"]) - len(scores))
        saved = [
            {
                "stopped": stopped,
                "decay_from": decay_from,
                "history": history,
                "val": (each or {}).get("val"),
            }
            for stopped, decay_from, history, each in zip(
                saved["stopped"],
                saved.get("decay_from", [None] * len(saved["stopped"])),
                saved["history"],
                scores,
                strict=True,
            )
        ]
    if saved is None or len(saved) != len(members):
        return
    for member, state in zip(members, saved, strict=True):
        member.load_state_dict(state)
