"""The members a job asks for: ``seeds=[0,1,2]`` trains one model per seed, all in one training
step; ``learning_rates=[1e-3,3e-3]`` one per learning rate (both: one per seed and learning
rate). A plain run is one member.

Each *member* is the single run of its seed (and learning rate, as ``model.optimizer.lr``):
initialised as ``seed=<k>`` would initialise it, fed that run's batches and positions (both pure
functions of ``(seed, step)``), stepped by the optimizer at its learning rate, with its own
gradient clipping, stopped by its own competence criterion (``learned_at``), and recorded in its
own directory ``<output_dir>/seed_<k>/`` (``lr_<lr>_seed_<k>/`` with learning rates;
``record.member_dir``) with the ``results.json``, ``best.ckpt`` and W&B run of a single run
(``member_of`` names the stack). Tables, ``skip_completed`` and ``eval.py`` treat a member as the
run of its seed (and of the setting ``model.optimizer.lr``).

Words: a *job* (``Job``) is the stack, what one ``trainer.fit`` trains; a *run* is one
member's training run, with its one ``results.json``. How the members train together (one
stacked network, ``pelab.models.stacked``) is ``pelab.lit_module``'s; how a job is executed,
``pelab.train``'s. This module says which members a config asks for, once, as a ``Job``.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, open_dict

from pelab.errors import ConfigError
from pelab.record import MEMBER_KEYS, is_stack, member_dir, member_grid
from pelab.reliability.resume.checkpoints import identity


@dataclass(frozen=True)
class Member:
    """One member of a job: the run of ``seed`` at ``learning_rate`` (None: the config's
    ``model.optimizer.lr``), with the config its single run would use (``member_configs``)."""

    index: int
    seed: int
    learning_rate: float | None
    config: DictConfig

    @property
    def directory(self) -> Path:
        """Where its run keeps ``results.json`` and ``checkpoints/best.ckpt``."""
        return Path(self.config.paths.output_dir)

    @property
    def identity(self) -> dict[str, Any]:
        """Its run's identity in a checkpoint (``reliability.resume.checkpoints.identity``)."""
        return identity(self.config)


@dataclass(frozen=True)
class Job:
    """The stack: the members one ``trainer.fit`` trains (``config``: the job's own, with its
    member lists), in ``directory``. ``live``: the job streams to one live W&B run as it trains
    (a plain run, its member in the job's directory); a stack's members buffer their logs and
    each replays them to its own run afterwards. The one place that asks "is this a stack?"."""

    config: DictConfig
    members: tuple[Member, ...]
    live: bool

    @classmethod
    def of(cls, cfg: DictConfig) -> Job:
        """The job ``cfg`` asks for: with a list in ``MEMBER_KEYS``, a stack of one member per
        seed and learning rate (``record.member_grid``), each in its own directory
        (``record.member_dir``); else a plain run, its one member in the job's directory. A
        ``ConfigError`` for a bad list."""
        if not is_stack(cfg):
            return cls(cfg, (Member(0, cfg.seed, None, cfg),), live=True)
        seeds = None if cfg.get("seeds") is None else check_seeds(cfg.seeds)
        rates = cfg.get("learning_rates")
        rates = None if rates is None else check_learning_rates(rates)
        grid = member_grid(cfg.seed, seeds, rates)
        members = (Member(k, s, lr, member_config(cfg, s, lr)) for k, (s, lr) in enumerate(grid))
        return cls(cfg, tuple(members), live=False)

    @property
    def directory(self) -> Path:
        return Path(self.config.paths.output_dir)

    @property
    def seeds(self) -> list[int]:
        return [m.seed for m in self.members]

    def member_of(self) -> dict[str, Any] | None:
        """What each member's record says of its stack (``member_of``); None for a plain run."""
        if self.live:
            return None
        rates = list(dict.fromkeys(m.learning_rate for m in self.members))
        return {
            "seeds": list(dict.fromkeys(self.seeds)),
            "learning_rates": None if rates == [None] else rates,
            "dir": str(self.directory),
        }


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
    """The config of each member of the job ``cfg`` asks for (``Job.of``)."""
    return [m.config for m in Job.of(cfg).members]


def member_config(cfg: DictConfig, seed: int, lr: float | None) -> DictConfig:
    """The config of the member of ``seed`` (and ``lr``) of the stack ``cfg``: ``cfg`` with its
    ``seed`` (and ``model.optimizer.lr``), no member lists, and its own output directory; what
    a single run of that seed and learning rate would use, up to its directory."""
    member = pickle.loads(pickle.dumps(cfg))  # a deep copy, flags kept; 2x copy.deepcopy's speed
    with open_dict(member):
        member.seed = seed
        for key in MEMBER_KEYS:
            member[key] = None
        if lr is not None:
            member.model.optimizer.lr = lr
        member.paths.output_dir = str(member_dir(cfg.paths.output_dir, seed, lr))
    return member
