"""A trained run in Python (a notebook): ``pelab.load_run(run_dir)`` returns its config, its
record and its model, ready to predict, score or inspect::

    import pelab

    run = pelab.load_run("logs/train/runs/2026-11-24_10-00-00")  # or a member: .../seed_1
    run.record["metrics"]["test_id"]    # what it scored (results.json)
    run.scores()                        # its test again: exact match, token accuracy per length
    run.scores([16, 64])                # at any lengths (their test sets are built and cached)
    prompt, answer = run.task.sample(4, 12, torch.Generator().manual_seed(0))
    run.predict(prompt)                 # greedy answers [4, m], as evaluation decodes them
    run.model.net                       # the Transformer, its encoding in run.model.net.pe

The model is rebuilt as re-evaluation rebuilds it (``pelab.evaluate``): from the run's resolved
config and the ``model_dims`` it was trained with, then the checkpoint's weights; it is in eval
mode, on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor
from torch.utils.data import DataLoader

from pelab.assembly import build_model, build_task
from pelab.data.eval_sets import load_eval_set
from pelab.evaluate import load_weights, trained_sizes, training_record
from pelab.lit_module import SequenceModel
from pelab.metrics import Scores
from pelab.tasks.base import Task
from pelab.threads import set_threads


@dataclass
class Run:
    """A trained run: its directory, resolved ``config``, ``record`` (``results.json``),
    ``task``, ``model`` (with the weights of ``checkpoint``)."""

    dir: Path
    config: DictConfig
    record: dict[str, Any]
    task: Task
    model: SequenceModel
    checkpoint: Path

    @torch.no_grad()
    def predict(self, prompt: Tensor, answer_length: int | None = None) -> Tensor:
        """Greedy answers ``[b, m]`` to ``prompt`` ``[b, n]`` (``m``: the task's answer length
        at ``n`` unless given), from the positions the run evaluates with."""
        m = self.task.answer_length(prompt.shape[1]) if answer_length is None else answer_length
        positions = self.model.sequence_positions(prompt, m, torch.Generator().manual_seed(0))
        return self.model.kind.predict(self.model.net, prompt, m, positions)

    @torch.no_grad()
    def scores(self, lengths: list[int] | None = None, split: str = "test") -> Scores:
        """Exact match and token accuracy at each length (default: the run's evaluation
        lengths) on the run's own fixed ``split`` sets (``test``: ``task.n_test`` samples per
        length, the sets its test scored; built and cached in ``paths.cache_dir`` if absent),
        batched as evaluation batches them: at its lengths, what its record says."""
        n = self.task.n_test if split == "test" else self.task.n_val
        scores: Scores = {}
        for length in lengths or list(self.task.eval_lengths):
            data = load_eval_set(self.task, split, length, n, self.config.paths.cache_dir)
            loader = DataLoader(data, batch_size=self.config.data.eval_batch_size)
            right = [
                self.model.correct(b["prompt"], b["answer"], length, i)
                for i, b in enumerate(loader)
            ]
            correct = torch.cat(right)
            scores[length] = {
                "exact_match": correct.all(dim=-1).float().mean().item(),
                "token_acc": correct.float().mean(dim=-1).mean().item(),
            }
        return scores


def load_run(
    run_dir: str | Path, checkpoint: str = "best", threads: str | int | None = "auto"
) -> Run:
    """The run in ``run_dir`` (a training run's output directory, or a member's
    ``seed_<k>/``) with the weights of ``checkpoints/<checkpoint>.ckpt`` (``best``: chosen by
    in-distribution validation; ``last``; or a path to any checkpoint of this run); a
    ``ConfigError`` naming what is missing otherwise. ``threads``: torch's CPU threads,
    ``auto`` (chosen by the model's size, ``pelab.threads``), a number, or ``None`` to leave
    them as they are."""
    path = Path(checkpoint)
    if path.suffix != ".ckpt":
        path = Path(run_dir) / "checkpoints" / f"{checkpoint}.ckpt"
    directory, record = training_record(path)
    config = OmegaConf.create(record["config"])
    task = build_task(config)
    model = build_model(config, task, trained_sizes(record, config))
    load_weights(model, path)
    if threads is not None:
        set_threads(threads, model.net.num_params()["total"])
    return Run(directory, config, record, task, model.eval(), path)
