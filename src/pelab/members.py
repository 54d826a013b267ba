"""Many runs in one process: ``seeds=[0,1,2]`` trains one model per seed, all in one training step;
``learning_rates=[1e-3,3e-3]`` one per learning rate (both: one per seed and learning rate).

Each *member* is the single run of its seed (and learning rate, as ``model.optimizer.lr``):
initialised as ``seed=<k>`` would initialise it, fed that run's batches and positions (both pure
functions of ``(seed, step)``), optimised by its own AdamW state (one parameter group per member,
at its learning rate, so its moments and weight decay are its own) with its own gradient
clipping, stopped by its own competence criterion (``learned_at``), and recorded in its own
directory ``<output_dir>/seed_<k>/`` (``lr_<lr>_seed_<k>/`` with learning rates;
``record.member_dir``) with the ``results.json``, ``best.ckpt`` and W&B run of a single run
(``member_of`` names the stack). Tables, ``skip_completed`` and ``eval.py`` treat a member as the
run of its seed (and of the setting ``model.optimizer.lr``).

A batched step (``members_step=batched``; ``auto``, the default, batches on an accelerator and
steps the members one after another on the CPU, where batching measured no faster) evaluates
every active member with ``torch.func``: the members' parameters are stacked (``[K, ...]``) and
the network is called once under ``vmap(functional_call)``. How the members' batches meet
(``stacking_mode``):

- ``padded``: a causal decoder whose encoding decodes with a key/value cache computes each
  position from the tokens before it only, so every member's teacher-forced sequence is padded
  on the right to the longest one and the loss ignores the padding: one call for all members.
- ``grouped``: other models (bidirectional attention, encodings that depend on the whole
  sequence) batch the members whose batches have the same shape, one call per shape.
- ``sequential``: an encoding that ``vmap`` cannot run (it probes one step at start) trains its
  members one after another in the same step, with a log line saying why, as
  ``members_step=sequential`` does.

With dropout > 0 a member draws its own dropout masks, from the process's RNG in a batched step
and from a stream of its own seed in a sequential one: a run of its seed, but not bitwise its
single run (which draws them from its own process's RNG).

A stopped member gets no gradient (its parameter group is skipped by the optimizer), so it no
longer changes; training ends when every member has stopped or at ``trainer.max_steps``. The
stack's own ``checkpoints/last.ckpt`` (every member, the optimizer, the members' criteria and
histories) resumes a killed stack exactly. Validation and the final test score each member on
its own, eagerly; a member's training history reaches its loggers after training.
"""

from __future__ import annotations

import copy
import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from hydra.utils import instantiate
from lightning.pytorch.callbacks import ModelCheckpoint
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict
from torch import Tensor, nn
from torch.func import functional_call, vmap
from torch.utils.data import Dataset

from pelab.competence import Competence, budget_outcome
from pelab.data.datamodule import TrainBatches
from pelab.errors import ConfigError
from pelab.lit_module import SequenceModel
from pelab.metrics import SELECTION_KEY
from pelab.model_kinds import ModelKind
from pelab.models.attention import Attention
from pelab.record import (
    MEMBER_KEYS,
    RESULTS,
    member_dir,
    member_grid,
    new_record,
    write_json_atomic,
)
from pelab.reliability.callbacks import ResumeState, exit_status_on_sigterm
from pelab.reliability.checkpoints import (
    IDENTITY_KEY,
    AtomicCheckpointIO,
    check_compatible,
    identity,
    read_checkpoint,
    resume_path,
)
from pelab.reliability.completed import completed_record
from pelab.reliability.data import ResumableTaskData
from pelab.reliability.memory import check_eval_memory
from pelab.runner import (
    Outcome,
    choices,
    configured_callbacks,
    execute,
    make_trainer,
    outcome,
)
from pelab.tokens import BLANK
from pelab.train import build_model, build_task, check_training, data_module

log = logging.getLogger(__name__)

IGNORE = -100  # a target the loss skips (``F.cross_entropy``'s ``ignore_index``)
MODES = ("padded", "grouped", "sequential")
# ``members_step``: ``batched`` (vmap; padded or grouped), ``sequential``, or ``auto``: batched on
# an accelerator, sequential on the CPU, where a batched step is no faster (the small matrix
# products are already compute-bound) and padding adds tokens (docs/performance.md)
STEPS = ("auto", "batched", "sequential")
# dropout under vmap: each member draws its own mask (from the global RNG, which checkpoints
# save), so a member with dropout > 0 is a run of its seed, not bitwise its single run
RANDOMNESS = "different"
STATE_KEY = "pelab_members"  # the stack's own state in its checkpoints


def check_seeds(seeds: Any) -> list[int]:
    """``seeds`` as a list of distinct ints; a ``ConfigError`` for anything else."""
    values = list(seeds) if isinstance(seeds, ListConfig | list | tuple) else None
    if not values or not all(isinstance(s, int) and not isinstance(s, bool) for s in values):
        raise ConfigError(
            f"seeds={seeds!r} is not a list of integer seeds, e.g. seeds=[0,1,2] (null: one run "
            "with `seed`)"
        )
    if len(set(values)) != len(values):
        raise ConfigError(f"seeds={values} repeats a seed; each member needs its own")
    return values


def check_learning_rates(learning_rates: Any) -> list[float]:
    """``learning_rates`` as a list of distinct positive numbers; a ``ConfigError`` otherwise."""
    values = list(learning_rates) if isinstance(learning_rates, ListConfig | list | tuple) else []
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    if not values or not numbers or min(values) <= 0:
        raise ConfigError(
            f"learning_rates={learning_rates!r} is not a list of positive learning rates, e.g. "
            "learning_rates=[1e-3,3e-3] (null: model.optimizer.lr)"
        )
    if len({float(v) for v in values}) != len(values):
        raise ConfigError(f"learning_rates={values} repeats a learning rate")
    return [float(v) for v in values]


def member_configs(cfg: DictConfig) -> list[DictConfig]:
    """The config of each member (``record.member_grid``: seeds x learning rates): ``cfg`` with
    its ``seed`` (and ``model.optimizer.lr``), no member lists, and its own output directory;
    what a single run of that seed and learning rate would use, up to its directory."""
    seeds = None if cfg.get("seeds") is None else check_seeds(cfg.seeds)
    rates = cfg.get("learning_rates")
    rates = None if rates is None else check_learning_rates(rates)
    configs = []
    for seed, lr in member_grid(cfg.seed, seeds, rates):
        member = copy.deepcopy(cfg)
        with open_dict(member):
            member.seed = seed
            for key in MEMBER_KEYS:
                member[key] = None
            if lr is not None:
                member.model.optimizer.lr = lr
            member.paths.output_dir = str(member_dir(cfg.paths.output_dir, seed, lr))
        configs.append(member)
    return configs


class MemberBatches(Dataset):
    """Item ``i``: the tuple of every member's batch ``i`` (``TrainBatches`` of its seed)."""

    def __init__(self, members: Iterable[TrainBatches]) -> None:
        self.members = list(members)

    def __len__(self) -> int:
        return len(self.members[0])

    def __getitem__(self, index: int) -> tuple[tuple[Tensor, Tensor], ...]:
        return tuple(member[index] for member in self.members)


class MemberData(ResumableTaskData):
    """The stack's data: each training item holds every member's batch; validation as a single
    run (the evaluation sets do not depend on the seed)."""

    def __init__(self, task: Any, seeds: Sequence[int], **options: Any) -> None:
        super().__init__(task, seed=seeds[0], **options)
        self.seeds = list(seeds)

    def train_batches(self) -> MemberBatches:
        return MemberBatches(
            TrainBatches(self.task, self.batch_size, self.num_batches, seed, self.length_sampling)
            for seed in self.seeds
        )


def stacked(nets: Sequence[nn.Module]) -> dict[str, Tensor]:
    """The members' parameters and buffers, each stacked ``[K, ...]`` (parameters keep their
    gradient path to every member's own tensors)."""
    named = [dict(net.named_parameters()) | dict(net.named_buffers()) for net in nets]
    return {name: torch.stack([n[name] for n in named]) for name in named[0]}


def padded_teacher_forcing(
    kind: Any, prompt: Tensor, answer: Tensor, positions: Tensor, length: int
) -> tuple[Tensor, Tensor, Tensor]:
    """A causal decoder's teacher-forced inputs ``[b, length]``, targets ``[b, length]``
    (``IGNORE`` off the answer) and positions ``[b|1, length(, k)]``, padded on the right:
    position ``t``'s logits depend on tokens ``<= t`` only, so the padding changes nothing
    before it."""
    inputs, answer_slice = kind.teacher_forcing(prompt, answer)
    b, n = inputs.shape
    pad = length - n
    targets = torch.full((b, length), IGNORE, dtype=answer.dtype)
    targets[:, answer_slice.start : answer_slice.start + answer.shape[1]] = answer
    inputs = F.pad(inputs, (0, pad), value=BLANK)
    positions = positions[:, :-1]  # the inputs' positions (the last answer token is not fed)
    if positions.dim() == 2:  # 1-D: counting on, so contiguous positions stay 0..length-1
        tail = positions[:, -1:] + torch.arange(1, pad + 1, dtype=positions.dtype)
    else:  # k-D: the last position repeated
        tail = positions[:, -1:].expand(-1, pad, *positions.shape[2:])
    return inputs, targets, torch.cat((positions, tail), dim=1)


def stacking_mode(
    member: SequenceModel, batches: Sequence[tuple[Tensor, Tensor]]
) -> tuple[str, nn.Module, str | None]:
    """How this model's members share a step (see the module docstring): the mode, the network
    whose structure the vmapped call runs (``member.net``, or a copy that attends with the eager
    kernel where the fused one cannot be vmapped with a learned bias) and, for ``sequential``,
    why. A vmapped forward and backward of copies of ``member``, one per batch of ``batches``
    (of different lengths), is tried."""
    kind, net = member.kind, member.net
    mode = "padded" if kind.net_options.get("causal") and net.supports_kv_cache else "grouped"
    items = [
        (prompt, answer, member.training_positions(prompt, answer.shape[1], seed))
        for seed, (prompt, answer) in enumerate(batches)
    ]
    why = ""
    for make_template in (lambda: net, lambda: _eager_copy(net)):
        template = make_template()
        try:
            losses = _batched_losses(kind, template, [net] * len(items), items, mode)
            torch.stack(losses).sum().backward()
        except Exception as error:  # whatever vmap cannot run: one member after another
            why = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
        else:
            return mode, template, None
        finally:
            net.zero_grad(set_to_none=True)
    return "sequential", net, why


def _eager_copy(net: nn.Module) -> nn.Module:
    """A copy of ``net`` whose attention layers use the eager kernel."""
    eager = copy.deepcopy(net)
    for module in eager.modules():
        if isinstance(module, Attention):
            module.attend = module.attend_eager
    return eager


def _batched_losses(
    kind: ModelKind,
    template: nn.Module,
    nets: Sequence[nn.Module],
    items: Sequence[tuple[Tensor, Tensor, Tensor]],
    mode: str,
) -> list[Tensor]:
    """The training loss of each of ``nets`` on its ``(prompt, answer, positions)``, in one
    vmapped call of ``template``'s structure (``padded``) or one per batch shape (``grouped``)."""
    if mode == "padded":
        length = max(p.shape[1] + a.shape[1] + 1 for p, a, _ in items)
        padded = [padded_teacher_forcing(kind, p, a, pos, length) for p, a, pos in items]

        def forward(params: dict[str, Tensor], inputs: Tensor, positions: Tensor) -> Tensor:
            return functional_call(template, params, (inputs, positions))

        inputs, targets, positions = zip(*padded, strict=True)
        positions, in_dim = _shared(positions)
        logits = vmap(forward, in_dims=(0, 0, in_dim), randomness=RANDOMNESS)(
            stacked(nets), torch.stack(inputs), positions
        )  # [K, b, length, V]
        return list(_mean_losses(logits, torch.stack(targets)))

    def answer_logits(params: dict[str, Tensor], *args: Tensor) -> Tensor:
        return kind.answer_logits(lambda *a: functional_call(template, params, a), *args)

    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, (p, a, pos) in enumerate(items):
        groups[(p.shape, a.shape, pos.shape)].append(i)
    losses: list[Tensor] = [torch.zeros(())] * len(items)
    for members in groups.values():
        prompts, answers, positions = zip(*(items[i] for i in members), strict=True)
        positions, in_dim = _shared(positions)
        logits = vmap(answer_logits, in_dims=(0, 0, 0, in_dim), randomness=RANDOMNESS)(
            stacked([nets[i] for i in members]),
            torch.stack(prompts),
            torch.stack(answers),
            positions,
        )
        for i, loss in zip(members, _mean_losses(logits, torch.stack(answers)), strict=True):
            losses[i] = loss
    return losses


def _shared(positions: Sequence[Tensor]) -> tuple[Tensor, int | None]:
    """The members' positions as ``vmap`` gets them: one tensor for all (``in_dims`` None) when
    they are equal, as contiguous positions are, so that encodings may inspect their values
    (e.g. a learned table's range check); stacked ``[K, ...]`` otherwise."""
    first = positions[0]
    if all(p.shape == first.shape and torch.equal(p, first) for p in positions[1:]):
        return first, None
    return torch.stack(positions), 0


def _mean_losses(logits: Tensor, targets: Tensor) -> Tensor:
    """``[K, b, m, V]`` logits and ``[K, b, m]`` targets -> each member's mean cross-entropy over
    its targets that are not ``IGNORE``, ``[K]``."""
    k = logits.shape[0]
    nll = F.cross_entropy(
        logits.flatten(0, 2).float(), targets.flatten(), ignore_index=IGNORE, reduction="none"
    ).view(k, -1)
    return nll.sum(dim=1) / (targets.view(k, -1) != IGNORE).sum(dim=1)


class MemberStack(L.LightningModule):
    """Trains ``members`` (``SequenceModel``s of one config, one per seed) in one step.

    ``competence``: each member's criterion (None without ``learned_at``); ``best_paths``: where
    each member's best checkpoint goes (by ``metrics.selection_score``, as ``best.ckpt`` of a
    single run); ``identities``: each member's ``checkpoints.identity`` for that checkpoint.
    """

    def __init__(
        self,
        members: Sequence[SequenceModel],
        best_paths: Sequence[Path],
        identities: Sequence[dict[str, Any]],
        competence: Sequence[Competence] | None = None,
        mode: str = "padded",
        template: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"unknown stacking mode {mode!r}; valid choices: {MODES}")
        self.members = nn.ModuleList(members)
        self.task, self.seeds = members[0].task, [m.seed for m in members]
        self.best_paths, self.identities = list(best_paths), list(identities)
        self.competence = list(competence) if competence is not None else None
        # the structure the vmapped call runs (not a submodule: the members own the weights)
        self.mode, self._template = mode, (template or members[0].net,)
        # sequential mode: each member's own stream of the global RNG (dropout), from its seed
        self.rng = [torch.Generator().manual_seed(seed).get_state() for seed in self.seeds]
        self.stopped = [False] * len(members)
        self.best: list[float | None] = [None] * len(members)
        # per member: (step, {logger key: value}) of every logged training step and validation
        self.history: list[list[tuple[int, dict[str, float]]]] = [[] for _ in members]

    @property
    def active(self) -> list[int]:
        return [k for k, stopped in enumerate(self.stopped) if not stopped]

    def training_step(self, batch: Sequence[tuple[Tensor, Tensor]], batch_idx: int) -> Tensor:
        step, active = self.global_step, self.active
        items = []
        for k in active:
            prompt, answer = batch[k]
            positions = self.members[k].training_positions(prompt, answer.shape[1], step)
            items.append((prompt, answer, positions))
        losses = self.member_losses(active, items)
        if step % self.trainer.log_every_n_steps == 0:
            for k, (prompt, _, _), loss in zip(active, items, losses, strict=True):
                values = {"train/loss": float(loss.detach()), "train/length": prompt.shape[1]}
                self.history[k].append((step, values))
        total = torch.stack(losses).sum()
        self.log("train/loss", total / len(losses), prog_bar=True)
        return total

    def member_losses(
        self, active: Sequence[int], items: Sequence[tuple[Tensor, Tensor, Tensor]]
    ) -> list[Tensor]:
        """The loss of each active member on its ``(prompt, answer, positions)``."""
        if self.mode == "sequential":
            losses = []
            for k, item in zip(active, items, strict=True):
                with self.own_rng(k):
                    losses.append(self.members[k].loss(*item))
            return losses
        nets = [self.members[k].net for k in active]
        return _batched_losses(self.members[0].kind, self._template[0], nets, items, self.mode)

    @contextmanager
    def own_rng(self, k: int) -> Iterator[None]:
        """Member ``k`` draws from the global RNG (dropout) in its own stream."""
        outside = torch.get_rng_state()
        torch.set_rng_state(self.rng[k])
        try:
            yield
        finally:
            self.rng[k] = torch.get_rng_state()
            torch.set_rng_state(outside)

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip each member's gradient by its own norm, as its single run clips it."""
        if gradient_clip_val is None:
            return
        for k in self.active:
            params = [p for p in self.members[k].parameters() if p.grad is not None]
            if gradient_clip_algorithm == "value":
                torch.nn.utils.clip_grad_value_(params, gradient_clip_val)
            else:
                torch.nn.utils.clip_grad_norm_(params, gradient_clip_val)

    def configure_optimizers(self):  # noqa: ANN201 (Lightning's union of return types)
        """One optimizer with a parameter group per member, at the member's learning rate
        (elementwise updates: each member's steps are its single run's); the members' shared
        schedule (it scales each group's own learning rate)."""
        first = self.members[0]
        groups = [
            {"params": list(m.net.parameters()), **_learning_rate(m.optimizer_factory)}
            for m in self.members
        ]
        return first.scheduled(first.optimizer_factory(groups), self.trainer.max_steps)

    def validation_step(
        self, batch: dict[str, Tensor], batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        for k in self.active:
            self.members[k].validation_step(batch, batch_idx, dataloader_idx)

    def on_validation_epoch_end(self) -> None:
        step, key = self.global_step, SELECTION_KEY
        for k in self.active:
            member = self.members[k]
            values = member.epoch_scores("val")
            self.history[k].append((step, values))
            best = self.best[k]
            if best is None or values[key] > best:  # ties keep the earlier, as ModelCheckpoint
                self.best[k] = values[key]
                self.save_member(k)
            if self.competence is not None:
                self.stopped[k] = self.competence[k].update(step, member.scores["val"], self.task)
        self.log("val/members_active", float(len(self.active)), prog_bar=True)
        if not self.active:
            self.trainer.should_stop = True

    def save_member(self, k: int) -> None:
        """Member ``k``'s weights as the ``best.ckpt`` a single run saves (what ``eval.py``
        reads and the test loads), with its identity and criterion."""
        callbacks: dict[str, Any] = {IDENTITY_KEY: {"identity": self.identities[k]}}
        if self.competence is not None:
            callbacks["pelab_learned_stop"] = self.competence[k].state_dict()
        checkpoint = {
            "epoch": self.current_epoch,
            "global_step": self.global_step,
            "pytorch-lightning_version": L.__version__,
            "state_dict": self.members[k].state_dict(),
            "callbacks": callbacks,
        }
        AtomicCheckpointIO().save_checkpoint(checkpoint, self.best_paths[k])

    def on_train_start(self) -> None:
        if not self.active:  # resumed from a checkpoint saved once every member had stopped
            self.trainer.should_stop = True

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[STATE_KEY] = {
            "stopped": self.stopped,
            "best": self.best,
            "history": self.history,
            "rng": self.rng,
            "competence": [c.state_dict() for c in self.competence or []],
            "val_scores": [m.scores.get("val") for m in self.members],
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint[STATE_KEY]
        self.stopped, self.best = list(state["stopped"]), list(state["best"])
        self.history = [[(s, dict(v)) for s, v in h] for h in state["history"]]
        self.rng = list(state["rng"])
        for c, saved in zip(self.competence or [], state["competence"], strict=True):
            c.load_state_dict(saved)
        for member, scores in zip(self.members, state.get("val_scores") or [], strict=False):
            if scores is not None and "val" not in member.scores:  # resumed at the last step
                member.scores["val"] = {int(n): dict(v) for n, v in scores.items()}

    def member_outcome(self, k: int) -> dict[str, Any]:
        """Member ``k``'s competence fields for its record."""
        if self.competence is None:
            return budget_outcome(None)
        return self.competence[k].outcome()


def _learning_rate(optimizer_factory: Any) -> dict[str, float]:
    """``{"lr": ...}`` of a member's optimizer (a ``functools.partial``), ``{}`` without one."""
    keywords = getattr(optimizer_factory, "keywords", {})
    return {"lr": keywords["lr"]} if "lr" in keywords else {}


def build_stack(cfg: DictConfig, configs: Sequence[DictConfig]) -> MemberStack:
    """The members of ``configs``, each built as its single run builds it (seeded, then built),
    in a stack whose mode ``stacking_mode`` probed; every setting checked first."""
    check_training(cfg)
    members = []
    for member in configs:
        L.seed_everything(member.seed, workers=True)
        members.append(build_model(member, build_task(member)))
    task = members[0].task
    check_eval_memory(cfg, task, members[0])
    step = cfg.get("members_step", "auto")
    if step not in STEPS:
        raise ConfigError(f"members_step={step!r}; valid choices: {', '.join(STEPS)}")
    if step == "auto":
        step = "sequential" if cfg.trainer.accelerator == "cpu" else "batched"
    mode, template = "sequential", members[0].net
    if step == "batched":
        lo, hi = task.train_lengths
        probe = [task.sample(2, n, torch.Generator().manual_seed(n)) for n in (lo, hi)]
        probe += [task.sample(2, hi, torch.Generator().manual_seed(0))]  # two of one shape
        mode, template, why = stacking_mode(members[0], probe)
        if why is not None:
            log.warning(
                "this model cannot run under torch.func.vmap (%s); its %d members train one "
                "after another in each step",
                why,
                len(members),
            )
    competence = None
    if cfg.get("learned_at") is not None:
        patience = cfg.get("learned_patience", 2)
        competence = [Competence(cfg.learned_at, patience) for _ in members]
    return MemberStack(
        members,
        [Path(m.paths.output_dir) / "checkpoints" / "best.ckpt" for m in configs],
        [identity(m) for m in configs],
        competence,
        mode,
        template,
    )


def member_data(cfg: DictConfig, stack: MemberStack) -> MemberData:
    return MemberData(
        stack.task,
        stack.seeds,
        batch_size=cfg.data.batch_size,
        num_batches=cfg.trainer.max_steps,
        eval_batch_size=cfg.data.eval_batch_size,
        cache_dir=cfg.paths.cache_dir,
        val_lengths=stack.members[0].lengths["val"],
        length_sampling=cfg.data.get("length_sampling", "uniform"),
    )


def fit(cfg: DictConfig, configs: Sequence[DictConfig]) -> tuple[MemberStack, str | None]:
    """Train the members of ``configs`` as one stack in ``cfg``'s output directory (resuming
    its ``last.ckpt``); returns the stack and the checkpoint resumed from."""
    torch.set_float32_matmul_precision("high")
    stack = build_stack(cfg, configs)
    ckpt_path = resume_path(cfg)
    if ckpt_path is not None:
        check_compatible(read_checkpoint(ckpt_path), cfg, stack, ckpt_path)
    # each member's best checkpoint is the stack's to save: no monitored ModelCheckpoint
    callbacks = [
        c
        for c in configured_callbacks(cfg, logged=False)
        if not (isinstance(c, ModelCheckpoint) and c.monitor is not None)
    ]
    trainer = instantiate(
        cfg.trainer,
        callbacks=[*callbacks, ResumeState(identity(cfg))],
        logger=False,
        plugins=[AtomicCheckpointIO()],
    )
    log.info(
        "training %d members (%s) in one step: %s",
        len(configs),
        ", ".join(f"{k}={cfg[k]}" for k in MEMBER_KEYS if cfg.get(k) is not None),
        stack.mode,
    )
    with exit_status_on_sigterm():
        trainer.fit(
            stack, datamodule=member_data(cfg, stack), ckpt_path=ckpt_path, weights_only=True
        )
    return stack, None if ckpt_path is None else str(ckpt_path)


def test_member(stack: MemberStack, k: int, cfg: DictConfig, resumed: str | None) -> Outcome:
    """Member ``k`` after training: its history to its loggers, its best checkpoint tested."""
    member, notes = stack.members[k], []
    trainer = make_trainer(cfg, member.net.num_params(), notes)
    for logger in trainer.loggers:
        for step, values in stack.history[k]:
            logger.log_metrics(values, step)
    if cfg.test:
        best = stack.best_paths[k] if stack.best_paths[k].is_file() else None
        data = data_module(cfg, member.task)
        trainer.test(member, datamodule=data, ckpt_path=best, verbose=False, weights_only=True)
    return outcome(
        cfg,
        member,
        resumed_from=resumed,
        warnings=notes,
        competence=stack.member_outcome(k),
    )


def run(cfg: DictConfig) -> list[dict[str, Any]]:
    """Train ``cfg``'s members as one stack and record each (see the module docstring):
    each member's ``results.json`` says ``running`` from the start, and ``completed`` or
    ``failed`` (with the stack's error) at the end. With ``skip_completed=true`` and every
    member already completed, their records are returned untrained."""
    configs, rates = member_configs(cfg), cfg.get("learning_rates")
    stack_of = {
        "seeds": list(dict.fromkeys(m.seed for m in configs)),
        "learning_rates": None if rates is None else check_learning_rates(rates),
        "dir": str(cfg.paths.output_dir),
    }
    if cfg.get("skip_completed"):
        done = [completed_record(m) for m in configs]
        if all(r is not None for r in done):
            return done
    containers = [OmegaConf.to_container(m, resolve=True) for m in configs]
    for member, config in zip(configs, containers, strict=True):
        record = new_record("train", choices(member), config) | {"member_of": stack_of}
        write_json_atomic(Path(member.paths.output_dir) / RESULTS, record)
    fitted: tuple[MemberStack, str | None] | BaseException
    start = time.perf_counter()
    try:
        fitted = fit(cfg, configs)
    except BaseException as error:  # every member's record says why
        fitted = error
    # the members' shared training time (each record's wall_time_s is its own test)
    stack_of["fit_time_s"] = round(time.perf_counter() - start, 1)
    records, failure = [], None
    for k, (member, config) in enumerate(zip(configs, containers, strict=True)):

        def work(k: int = k, member: DictConfig = member) -> Outcome:
            if isinstance(fitted, BaseException):
                raise fitted
            return test_member(fitted[0], k, member, fitted[1])

        try:
            records.append(
                execute(
                    "train",
                    member.paths.output_dir,
                    choices(member),
                    config,
                    work,
                    member_of=stack_of,
                )
            )
        except BaseException as error:
            failure = failure or error
    if failure is not None:
        raise failure
    return records
