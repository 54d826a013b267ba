"""What a finished run hands to its record (``pelab.recorder``): its ``Outcome``, the same for a
training run's member and a re-evaluation, scored on the same test sets with the same chance
levels (``scored_outcome``)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from omegaconf import DictConfig

from pelab.chance import eval_chance
from pelab.lit_module import SequenceModel
from pelab.metrics import Scores
from pelab.tasks.base import Task


@dataclass
class Outcome:
    """A finished run: the task, the scores of each split, the chance levels of the test sets,
    the model's sizes, and notes."""

    task: Task
    scores: dict[str, Scores]
    chance: Scores | None
    params: dict[str, int]
    model_dims: dict[str, Any]
    checkpoint: str | None = None  # training: the file its test scores come from
    checkpoint_step: int | None = None  # and that file's training step
    resumed_from: str | None = None
    resumed_from_step: int | None = None
    warnings: list[str] = field(default_factory=list)
    competence: dict[str, Any] | None = None  # training: pelab.competence.competence_fields
    attention: dict[str, str] | None = None  # the kernel and dtype it ran (pelab.kernels)
    time_split: dict[str, Any] | None = None  # training: where its time went (pelab.phase_times)


def scored_outcome(
    cfg: DictConfig, model: SequenceModel, member: int = 0, **notes: Any
) -> Outcome:
    """The outcome of ``member`` of a model whose test (``cfg.test``) has run: its scores, and
    the chance level of each metric on the very test sets it was scored on."""
    task = model.task
    chance = eval_chance(task, "test", task.n_test, cfg.paths.cache_dir) if cfg.test else None
    return Outcome(
        task=task,
        scores=dict(model.members[member].scores),
        chance=chance,
        params=model.net.num_params(),
        model_dims=json.loads(json.dumps(asdict(model.net.dims))),  # as results.json holds it
        **notes,
    )
