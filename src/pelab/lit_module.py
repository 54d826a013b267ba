"""The LightningModule: K >= 1 members trained as one stacked network, answer-only loss,
per-length metrics per member. Each member's state has one home (``pelab.member_state``,
``members[k]``); their optimization (AdamW with warmup + cosine decay, each member's own learning
rate and decay) is ``pelab.member_optimization``'s."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pelab.compiled import CompiledOrEager
from pelab.logging_steps import logging_step
from pelab.member_log import MemberLog
from pelab.member_optimization import MemberOptimization
from pelab.member_state import MemberState, restore_members, save_members
from pelab.metrics import SELECTION_KEY, logged_values, selection_score
from pelab.model_kinds import ModelKind
from pelab.models.stacked import fold, fold_positions, members_of, select
from pelab.positions import ContiguousPositions, PositionSampler
from pelab.running_scores import RunningScores
from pelab.tasks.base import Task


class SequenceModel(L.LightningModule):
    """Trains the members of ``net`` on ``task`` in the sequences of its model ``kind``
    (``pelab.model_kinds``): K >= 1 members (``pelab.models.stacked``; a plain run is K = 1),
    ``members[k]`` (``pelab.member_state.MemberState``) of seed ``seeds[k]`` at learning rate
    ``learning_rates[k]`` (None: the optimizer's own).

    Each training step takes one batch per member (``TaskData``), folds the batches of one shape
    into one call of the stacked network, and sums the members' mean losses (their gradients are
    their own); a member that ``stopped`` (``LearnedStop``) is left out and keeps its weights.
    Each validation and test epoch scores every member in one folded call, every metric of the
    split per length, into ``members[k].scores[split]``. ``live``: the loggers get them as they
    come (``Job.live``); otherwise each member's ``history`` keeps them for its own loggers
    (``pelab.member_log``). ``positions``: the run's sampler (``pelab.positions``)."""

    def __init__(
        self,
        net: nn.Module,
        kind: ModelKind,
        task: Task,
        optimizer: Callable[..., torch.optim.Optimizer],
        warmup_steps: int = 100,
        min_lr_ratio: float = 0.1,
        decay_at: float | None = None,
        decay_steps: int = 400,
        positions: PositionSampler | None = None,
        compile: bool = False,
        val_lengths: list[int] | None = None,
        seed: int = 0,
        seeds: Sequence[int] | None = None,
        learning_rates: Sequence[float] | None = None,
        live: bool = False,
    ) -> None:
        super().__init__()
        self.net, self.kind, self.task = net, kind, task
        seeds = list(seeds) if seeds is not None else [seed]
        if len(seeds) != members_of(net):
            raise ValueError(f"{len(seeds)} seeds for a network of {members_of(net)} members")
        rates = [None] * len(seeds) if learning_rates is None else list(learning_rates)
        self.members = [MemberState(s, lr) for s, lr in zip(seeds, rates, strict=True)]
        # ``compile``: the training forward only (greedy decoding would recompile every step)
        self.train_logits = CompiledOrEager(kind.answer_logits) if compile else kind.answer_logits
        self.positions = positions or ContiguousPositions()
        schedule = (warmup_steps, min_lr_ratio, decay_at, decay_steps)
        self.optimization = MemberOptimization(optimizer, *schedule)
        self.running = RunningScores(len(self.members), task.eval_lengths)
        self.log_sink = MemberLog(self.members, live)
        # the last training step's loss of each member (on the device) and its batch's length
        self.step_losses: dict[int, Tensor] = {}
        self.step_lengths: dict[int, int] = {}
        self.validated: list[int] = []  # the members the last validation scored
        # the lengths each split scores, in the order of its data loaders
        self.lengths = {
            "val": list(task.eval_lengths if val_lengths is None else val_lengths),
            "test": list(task.eval_lengths),
        }

    def selected(self, members: Sequence[int]) -> AbstractContextManager[None]:
        """Forwards inside compute only ``members`` (``pelab.models.stacked.select``)."""
        if list(members) == list(range(len(self.members))):
            return nullcontext()
        return select(self.net, members)

    def stop_member(self, k: int) -> None:
        """Member ``k`` trains no more (``LearnedStop``): it is left out of the forward and
        its step is 0 from now on."""
        self.members[k].stopped = True

    @property
    def active(self) -> list[int]:
        """The members still training."""
        return [k for k, member in enumerate(self.members) if not member.stopped]

    def training_step(self, batch: Sequence[tuple[Tensor, Tensor]], batch_idx: int) -> Tensor:
        """The members' summed loss; each member's loss is kept, on the device, for
        ``on_train_batch_end`` to log at a logging step."""
        losses = self.member_losses(batch, self.global_step)
        self.step_losses = {k: loss.detach() for k, loss in losses.items()}
        self.step_lengths = {k: batch[k][0].shape[1] for k in losses}
        return torch.stack(list(losses.values())).sum()

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """At a ``logging_step`` only, the step's losses (read on the host) and each member's
        decay (``decay_at``), to the loggers or histories; other steps read nothing."""
        step = self.global_step - 1  # the optimizer has stepped
        if not logging_step(self._trainer, step):
            return
        decay = None
        if self.optimization.decay_at is not None:
            decay = [self.optimization.decay(m, self.global_step) for m in self.members]
        self.log_sink.training_step(self, step, self.step_losses, self.step_lengths, decay)

    def member_losses(
        self, batch: Sequence[tuple[Tensor, Tensor]], step: int
    ) -> dict[int, Tensor]:
        """The loss of each active member ``k`` on its batch ``batch[k]`` at training step
        ``step``: the members whose batches share a shape in one call."""
        losses: dict[int, Tensor] = {}
        for members in self.shape_groups(batch):
            prompt = fold([batch[k][0] for k in members])
            answer = fold([batch[k][1] for k in members])
            drawn = members[:1] if self.positions.shared else members  # shared: member 0's
            positions = fold_positions(
                [
                    self.training_positions(
                        batch[k][0], answer.shape[1], step, self.members[k].seed
                    )
                    for k in drawn
                ],
                self.positions.shared,
            )
            with self.selected(members):
                each = self.loss(prompt, answer, positions, len(members))
            losses |= dict(zip(members, each, strict=True))
        return losses

    def shape_groups(self, batch: Sequence[tuple[Tensor, Tensor]]) -> list[list[int]]:
        """The active members grouped by the shapes of their batches (one call each)."""
        groups: dict[tuple, list[int]] = {}
        for k in self.active:
            prompt, answer = batch[k]
            groups.setdefault((prompt.shape, answer.shape), []).append(k)
        return list(groups.values())

    def loss(self, prompt: Tensor, answer: Tensor, positions: Tensor, members: int = 1) -> Tensor:
        """Each member's mean cross-entropy of its teacher-forced answer tokens, ``[members]``
        (its batch's rows of the folded ``prompt`` and ``answer``)."""
        logits = self.train_logits(self.net, prompt, answer, positions)  # [K b, m, vocab]
        if members == 1:
            return F.cross_entropy(logits.flatten(0, 1).float(), answer.flatten())[None]
        each = F.cross_entropy(logits.flatten(0, 1).float(), answer.flatten(), reduction="none")
        return each.view(members, -1).mean(dim=1)

    def training_positions(
        self, prompt: Tensor, answer_length: int, step: int, seed: int | None = None
    ) -> Tensor:
        """The positions of training step ``step`` of the member of ``seed`` (default: member
        0's): like its batch (``TrainBatches``), a pure function of ``(seed, step)``, so a
        resumed run or a member of a stack draws what the uninterrupted single run draws."""
        seed = self.members[0].seed if seed is None else seed
        generator = torch.Generator().manual_seed(seed * 1_000_003 + step + 7_919)
        return self.sequence_positions(prompt, answer_length, generator)

    def sequence_positions(
        self, prompt: Tensor, answer_length: int, generator: torch.Generator | None = None
    ) -> Tensor:
        """Positions of the canonical sequence ``BOS prompt SEP answer``,
        ``[b|1, n + m + 2(, k)]``, from the run's sampler."""
        b, n = prompt.shape
        return self.positions(b, n, answer_length, generator, prompt.device)

    def _evaluate(
        self, split: str, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int
    ) -> None:
        """Score one evaluation batch of every member that takes part. The test decodes
        greedily (``exact_match``, ``token_acc``); validation reads one teacher-forced pass
        (``exact_match``, ``next_token_acc``: ``pelab.metrics.VALIDATION_METRICS``), whose
        exact match is greedy decoding's, unless the network's outputs depend on what follows
        (``one_pass_exact``): then its exact match is decoded greedily."""
        length = self.lengths[split][dataloader_idx]
        members = self.active if split == "val" else list(range(len(self.members)))
        if not members:
            return
        answer = batch["answer"]
        if split == "val":
            forced = self.correct(batch["prompt"], answer, length, batch_idx, members, True)
            exact = (
                forced
                if self.one_pass_exact
                else self.correct(batch["prompt"], answer, length, batch_idx, members)
            )
            scores = {"exact_match": exact.all(dim=-1), "next_token_acc": forced.float().mean(-1)}
        else:
            greedy = self.correct(batch["prompt"], answer, length, batch_idx, members)
            scores = {"exact_match": greedy.all(dim=-1), "token_acc": greedy.float().mean(-1)}
        self.running.update(members, length, scores)

    @property
    def one_pass_exact(self) -> bool:
        """Whether one teacher-forced pass gives greedy decoding's exact match: every network
        whose output at a position depends only on the tokens and positions up to it
        (``prefix_only``; not RoPE with a length-dependent scaling, whose frequencies follow the
        whole sequence's length)."""
        return bool(getattr(self.net, "prefix_only", True))

    def correct(
        self,
        prompt: Tensor,
        answer: Tensor,
        length: int,
        batch_idx: int,
        members: Sequence[int] = (0,),
        one_pass: bool = False,
    ) -> Tensor:
        """Which answer tokens of each of ``members`` are right, ``[members b, m]``
        (member-major), for batch ``batch_idx`` of an evaluation set at ``length`` (its positions
        are a pure function of ``(length, batch_idx)``: the same every epoch, for every member,
        and for ``pelab.load_run``): decoded greedily, or with ``one_pass`` the argmax of one
        teacher-forced pass (each token predicted from the true prefix)."""
        generator = torch.Generator().manual_seed(length * 100_003 + batch_idx)
        positions = self.sequence_positions(prompt, answer.shape[1], generator)
        n = len(members)
        folded_positions = fold_positions([positions] * n, shared=positions.shape[0] == 1)
        if n > 1:
            prompt, answer = prompt.repeat(n, 1), answer.repeat(n, 1)
        with self.selected(members), torch.no_grad():
            if one_pass:
                logits = self.kind.answer_logits(self.net, prompt, answer, folded_positions)
                predicted = logits.argmax(dim=-1)
            else:
                predicted = self.kind.predict(self.net, prompt, answer.shape[1], folded_positions)
        return predicted == answer

    def validation_step(
        self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._evaluate("val", batch, batch_idx, dataloader_idx)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        self._evaluate("test", batch, batch_idx, dataloader_idx)

    def epoch_scores(self, split: str, k: int = 0) -> dict[str, float]:
        """End an epoch of ``split`` for member ``k``: its scores into
        ``members[k].scores[split]`` (the running states reset); returns the values to log
        (``pelab.metrics.logged_values``)."""
        scores = self.running.compute(k, split, self.lengths[split])
        self.members[k].scores[split] = scores
        values = logged_values(split, scores, self.task.in_distribution)
        if split == "val":
            in_distribution = self.task.in_distribution
            values[SELECTION_KEY] = selection_score(scores, in_distribution, self.task.n_val)
        return values

    def _end_epoch(self, split: str) -> None:
        members = self.active if split == "val" else list(range(len(self.members)))
        scored = {k: self.epoch_scores(split, k) for k in members}
        if split == "val":
            self.validated = members  # the members this validation scored
            for k in members:
                in_distribution = self.task.in_distribution
                self.optimization.start_decay(self.members[k], in_distribution, self.global_step)
        self.log_sink.epoch(self, split, scored)

    def on_validation_epoch_end(self) -> None:
        self._end_epoch("val")

    def on_test_epoch_end(self) -> None:
        self._end_epoch("test")

    def configure_optimizers(self):  # noqa: ANN201 (Lightning's union of return types)
        return self.optimization.configure(self.net, self.members, self.trainer.max_steps)

    def optimizer_step(
        self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None
    ) -> None:
        self.optimization.step(
            self.net, optimizer, optimizer_closure, self.members, self.global_step
        )

    def configure_gradient_clipping(
        self,
        optimizer: Any,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        self.optimization.clip(self, optimizer, gradient_clip_val, gradient_clip_algorithm)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        save_members(checkpoint, self.members)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        restore_members(checkpoint, self.members)
