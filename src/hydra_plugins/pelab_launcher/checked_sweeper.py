"""``hydra/sweeper=checked`` (the default of ``configs/train.yaml`` and ``configs/eval.yaml``):
Hydra's basic sweeper, which first composes every job's config and checks it as the job itself
would before training (``check_training_job``) or testing (``pelab.evaluate.check_evaluation``:
the options against the checkpoint's encoding), and refuses the whole sweep, one line per bad
job, before it makes the sweep directory or starts any job, with whatever launcher (basic,
parallel, slurm, local).

Hydra's own sweeper makes the directory first and composes job by job as it launches them, so a
misspelt value left an empty sweep directory, and a bad value (``model.net.n_heads=5``) stopped
its job only after the jobs before it had trained."""

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import HydraContext
from omegaconf import DictConfig

from hydra_plugins.pelab_launcher.job_config import (
    configs_read_once,
    job_config,
    job_dir,
    run_config,
)
from pelab.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass
class CheckedSweeperConf:
    _target_: str = "hydra_plugins.pelab_launcher.checked_sweeper.CheckedSweeper"
    max_batch_size: int | None = None
    params: dict[str, str] | None = None


ConfigStore.instance().store(
    group="hydra/sweeper", name="checked", node=CheckedSweeperConf, provider="pelab"
)


class CheckedSweeper(BasicSweeper):
    def sweep(self, arguments: list[str]) -> Any:
        """Check every job (``refusals``), then sweep as Hydra's basic sweeper does; a
        ``ConfigError`` naming each bad job when any is refused."""
        assert self.config is not None and self.hydra_context is not None
        jobs = self.jobs(arguments)
        start = time.perf_counter()
        refused = refusals(self.hydra_context, self.config, jobs)
        elapsed = time.perf_counter() - start
        log.info("checked the settings of %d job(s) in %.1f s", len(jobs), elapsed)
        if refused:
            raise ConfigError(
                f"{len(refused)} of {len(jobs)} jobs of this sweep are refused, so none ran:\n"
                + "\n".join(f"  {line}" for line in refused)
            )
        return super().sweep(arguments)

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        """Nothing: ``sweep`` composed and checked every job before the first batch."""

    def jobs(self, arguments: list[str]) -> list[list[str]]:
        """Every job's overrides, in launch order, as ``BasicSweeper.sweep`` expands them."""
        assert self.hydra_context is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides([*self._parse_config(), *arguments])
        return [job for batch in self.split_arguments(overrides, None) for job in batch]


def refusals(hydra_context: HydraContext, config: DictConfig, jobs: list[list[str]]) -> list[str]:
    """``#<n> <its swept values>: <why>`` for each job whose config cannot be composed or that its
    run would refuse (``check_training_job``; an error that is no user's mistake is named by
    its type, as the job would fail on it), or that its re-evaluation would refuse
    (``check_evaluation``)."""
    previous = HydraConfig.instance().cfg
    swept = swept_keys(jobs)
    try:
        with configs_read_once(hydra_context.config_loader):
            found = [
                refusal(hydra_context, config, overrides, num, swept)
                for num, overrides in enumerate(jobs)
            ]
    finally:
        if previous is not None:
            HydraConfig.instance().set_config(previous)
    return [line for line in found if line is not None]


def refusal(
    hydra_context: HydraContext,
    config: DictConfig,
    overrides: list[str],
    num: int,
    swept: set[str],
) -> str | None:
    """``refusals``'s line for job ``num``, None when nothing refuses it."""
    from pelab.cli import user_message

    try:
        composed = job_config(hydra_context, config, overrides, num)
        HydraConfig.instance().set_config(composed)  # ${hydra:...} resolves as in the job
        job = run_config(composed, job_dir(composed))
        if "model" in composed:
            check_training_job(job)
        else:  # a re-evaluation: its model is its checkpoint's
            from pelab.evaluate import check_evaluation

            check_evaluation(job)
    except Exception as error:
        message = user_message(error) or f"{type(error).__name__}: {error}"
        named = [o for o in overrides if o.split("=", 1)[0] in swept] or overrides
        return f"#{num} {' '.join(named)}: {message.splitlines()[0]}"
    return None


def swept_keys(jobs: list[list[str]]) -> set[str]:
    """The keys whose value differs between ``jobs``: what tells one job from another."""
    values: dict[str, set[str]] = {}
    for overrides in jobs:
        for override in overrides:
            key, _, value = override.partition("=")
            values.setdefault(key, set()).add(value)
    return {key for key, seen in values.items() if len(seen) > 1}


def check_training_job(cfg: DictConfig) -> None:
    """A ``ConfigError`` for what ``pelab.train.train`` would refuse before its first step, from
    the settings alone: every setting (``check_training``), the members, the task, and the
    shapes of one member's model (built on the CPU: a few milliseconds at the presets' sizes)."""
    from pelab.assembly import check_training
    from pelab.members import Job
    from pelab.sizing import built

    check_training(cfg)
    built(Job.of(cfg), members=1)
