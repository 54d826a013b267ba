"""What a checkpoint carries of a stack's members beside their weights
(``pelab.lit_module.SequenceModel``'s part): the engine's version, each member's state (stopped,
buffered history, decay) and its last validation's scores."""

from __future__ import annotations

from typing import Any

from pelab.reliability.resume.checkpoints import ENGINE, ENGINE_KEY, MEMBERS_KEY, SCORES_KEY


class MemberCheckpointState:
    """The checkpoint hooks of a LightningModule of K >= 1 members: it saves and restores the
    module's ``stopped``, ``log_sink.history``, ``decay_from`` and ``member_scores``."""

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """The engine's version, each member's state (stopped, history) and the last
        validation's scores go with the weights: a run resumed at its final step (killed during
        its test) has no validation left to run, and records them from here."""
        checkpoint[ENGINE_KEY] = ENGINE
        checkpoint[MEMBERS_KEY] = {
            "stopped": self.stopped,
            "history": self.log_sink.history,
            "decay_from": self.decay_from,
        }
        checkpoint[SCORES_KEY] = [
            {"val": s["val"]} if "val" in s else {} for s in self.member_scores
        ]

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        saved = checkpoint.get(SCORES_KEY) or []
        if isinstance(saved, dict):  # one member's checkpoint (``BestCheckpoints``)
            saved = [saved]
        for scores, member in zip(saved, self.member_scores, strict=False):
            val = scores.get("val")
            if val is not None and "val" not in member:  # never over this run's own
                member["val"] = {int(n): dict(v) for n, v in val.items()}
        state = checkpoint.get(MEMBERS_KEY)
        if state is not None and len(state["stopped"]) == len(self.seeds):
            self.stopped = list(state["stopped"])
            self.log_sink.history = [[(s, dict(v)) for s, v in h] for h in state["history"]]
            self.decay_from = list(state.get("decay_from", self.decay_from))
