"""A trained run in Python (a notebook): ``pelab.load_run(run_dir)`` returns its config, its
record and its model, ready to predict, score or inspect::

    import pelab

    run = pelab.load_run("logs/train/runs/2026-11-24_10-00-00")  # or a member: .../seed_1
    run.record["metrics"]["test_id"]    # what it scored (results.json)
    run.scores()                        # its test again: exact match, token accuracy per length
                                        # as fractions, as results.json holds them (0.123: 12.3%)
    run.scores([16, 64])                # at any lengths (their test sets are built and cached)
    run.predict("c a b")                # the answer as text: "c a b" for copy
    run.symbols()                       # the task's symbols as text: a, b, ..., digits 0-9
    prompt, answer = run.task.sample(4, 12, torch.Generator().manual_seed(0))
    run.predict(prompt)                 # greedy answers [4, m], as evaluation decodes them
    run.decode(answer[0]), run.encode("c a b")  # token ids <-> text
    run.model.net                       # the Transformer, its encoding in run.model.net.pe

A prompt is the task's symbols only (token ids ``N_SPECIAL .. vocab_size - 1``, as
``task.sample`` draws them): ``predict`` adds BOS and SEP itself, as the model kind builds the
sequence. As text, symbols are separated by spaces: a task's digits (``task.digit_tokens``) are
named ``0``-``9`` (bits ``0``/``1``), its other symbols ``a``-``z``, ``A``-``Z`` in token order,
then ``<id>`` (any symbol may also be written ``<id>``).

The model is rebuilt as re-evaluation rebuilds it (``pelab.evaluate``): from the run's resolved
config and the ``model_dims`` it was trained with, then the checkpoint's weights; it is in eval
mode, on the CPU.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor
from torch.utils.data import DataLoader

from pelab.assembly import build_model, build_task
from pelab.data.eval_sets import load_eval_set
from pelab.errors import ConfigError
from pelab.lit_module import SequenceModel
from pelab.metrics import Scores
from pelab.record import RESULTS
from pelab.reliability.resume.start import run_checkpoint
from pelab.tasks.base import Task
from pelab.threads import set_threads
from pelab.tokens import BLANK, BOS, N_SPECIAL, SEP
from pelab.trained import load_weights, trained_sizes, training_record

SPECIAL_NAMES = {BOS: "BOS", SEP: "SEP", BLANK: "BLANK"}


def symbol_names(task: Task) -> list[str]:
    """The text of each symbol of ``task`` in token order (token ``N_SPECIAL + i`` is the
    ``i``-th): its digits ``0``-``9`` (``task.digit_tokens``), the others ``a``-``z``,
    ``A``-``Z``, then ``<id>``."""
    digits = {token: str(place) for place, token in enumerate(task.digit_tokens)}
    letters = iter(string.ascii_lowercase + string.ascii_uppercase)
    tokens = range(N_SPECIAL, task.vocab_size)
    return [digits.get(t) or next(letters, None) or f"<{t}>" for t in tokens]


@dataclass(repr=False)
class Run:
    """A trained run: its directory, resolved ``config``, ``record`` (``results.json``),
    ``task``, ``model`` (with the weights of ``checkpoint``)."""

    dir: Path
    config: DictConfig
    record: dict[str, Any]
    task: Task
    model: SequenceModel
    checkpoint: Path

    def __repr__(self) -> str:
        c = self.record.get("choices") or {}
        picked = ", ".join(f"{k}={c[k]}" for k in ("pe", "task", "model", "seed") if k in c)
        return f"Run({picked}, status={self.record.get('status')}, checkpoint={self.checkpoint})"

    def symbols(self) -> list[str]:
        """The task's symbols as text, in token order (``symbol_names``)."""
        return symbol_names(self.task)

    def encode(self, text: str) -> Tensor:
        """Space-separated symbols -> token ids ``[n]``; a ``ValueError`` naming an unknown
        symbol and the valid ones."""
        ids = {name: N_SPECIAL + i for i, name in enumerate(self.symbols())}
        ids |= {f"<{t}>": t for t in range(N_SPECIAL, self.task.vocab_size)}
        tokens = []
        for word in text.split():
            if word not in ids:
                raise ValueError(
                    f"{word!r} is not a symbol of the {self.task.task_name} task; its symbols: "
                    f"{', '.join(self.symbols())} (separated by spaces; or <id>)"
                )
            tokens.append(ids[word])
        if not tokens:
            raise ValueError("an empty prompt: write the task's symbols separated by spaces")
        return torch.tensor(tokens)

    def decode(self, tokens: Tensor) -> str:
        """Token ids ``[n]`` -> space-separated symbols (special tokens as ``BOS``, ...)."""
        names = self.symbols()
        return " ".join(
            names[t - N_SPECIAL] if t >= N_SPECIAL else SPECIAL_NAMES.get(t, f"<{t}>")
            for t in (int(t) for t in tokens)
        )

    @torch.no_grad()
    def predict(
        self, prompt: str | list[str] | Tensor, answer_length: int | None = None
    ) -> str | list[str] | Tensor:
        """Greedy answers to ``prompt``, from the positions the run evaluates with: text
        (``"c a b"``, the task's symbols separated by spaces) -> the answer as text; a list of
        texts of one length -> a list; token ids ``[b, n]`` (or ``[n]``) -> ids ``[b, m]``
        (``m``: the task's answer length at ``n`` unless given). A prompt holds the task's
        symbols only: BOS and SEP are added here. A ``ValueError`` says what is wrong with a
        bad prompt."""
        if isinstance(prompt, str):
            return self.decode(self.predict(self.encode(prompt)[None], answer_length)[0])
        if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
            encoded = [self.encode(p) for p in prompt]
            if len({len(e) for e in encoded}) > 1:
                raise ValueError(
                    "the prompts of one call must have one length (the model decodes them as "
                    f"one batch); got lengths {[len(e) for e in encoded]}"
                )
            answers = self.predict(torch.stack(encoded), answer_length)
            return [self.decode(a) for a in answers]
        if not isinstance(prompt, Tensor):
            raise ValueError(
                f'a prompt is text ("{" ".join(self.symbols()[:3])}"), a list of texts, or a '
                f"tensor of token ids [batch, length]; got {type(prompt).__name__}"
            )
        prompt = self._checked(prompt)
        m = self.task.answer_length(prompt.shape[1]) if answer_length is None else answer_length
        positions = self.model.sequence_positions(prompt, m, torch.Generator().manual_seed(0))
        return self.model.kind.predict(self.model.net, prompt, m, positions)

    def _checked(self, prompt: Tensor) -> Tensor:
        """``prompt`` as ``[b, n]`` long token ids of the task's symbols, or a ``ValueError``."""
        if prompt.dim() == 1:
            prompt = prompt[None]
        if prompt.dim() != 2 or prompt.is_floating_point() or prompt.shape[1] == 0:
            raise ValueError(
                "a prompt tensor holds integer token ids [batch, length] (or [length]); got "
                f"shape {list(prompt.shape)} of {prompt.dtype}"
            )
        low, high = N_SPECIAL, self.task.vocab_size - 1
        bad = ((prompt < low) | (prompt > high)).nonzero()
        if len(bad):
            row, col = (int(i) for i in bad[0])
            token = int(prompt[row, col])
            if token in SPECIAL_NAMES:
                raise ValueError(
                    f"token {token} ({SPECIAL_NAMES[token]}) at [{row}, {col}]: a prompt holds "
                    "only the task's symbols, and predict adds BOS and SEP itself"
                )
            raise ValueError(
                f"token {token} at [{row}, {col}] is not a symbol of the "
                f"{self.task.task_name} task; valid token ids: {low}..{high}"
            )
        return prompt.long()

    @torch.no_grad()
    def scores(self, lengths: list[int] | None = None, split: str = "test") -> Scores:
        """Exact match and token accuracy at each length (default: the run's evaluation
        lengths), as fractions in [0, 1] like ``results.json`` (a table's 12.3% is 0.123), on
        the run's own fixed ``split`` sets (``test``: ``task.n_test`` samples per
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
    members = sorted(p.parent.name for p in Path(run_dir).glob(f"*seed_*/{RESULTS}"))
    if path.suffix != ".ckpt" and members and not (Path(run_dir) / RESULTS).exists():
        raise ConfigError(
            f"{run_dir} is the job of a stack of members (seeds=[...] / learning_rates=[...]): "
            f"each member is a run of its own; load one of {', '.join(members)}, e.g. "
            f"load_run('{Path(run_dir) / members[0]}')"
        )
    if path.suffix != ".ckpt":
        if len(path.parts) > 1:  # a path, but to no checkpoint file
            raise ConfigError(
                f"checkpoint={checkpoint!r} is neither best, last nor a .ckpt file (a run "
                f"directory is the first argument: load_run('{checkpoint}'))"
            )
        path = run_checkpoint(run_dir, checkpoint)
    directory, record = training_record(path)
    config = OmegaConf.create(record["config"])
    task = build_task(config)
    model = build_model(config, task, trained_sizes(record, config))
    load_weights(model, path)
    if threads is not None:
        set_threads(threads, model.net.num_params()["total"])
    return Run(directory, config, record, task, model.eval(), path)
