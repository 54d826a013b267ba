"""Draw a positional encoding: ``python scripts/inspect_pe.py pe=<name> [model=encoder]
[model.net.d_model=128] [length=32] [out_dir=...] [wandb=true]`` (``configs/inspect.yaml``).

The encoding is built exactly as training builds it (``configs/inspect.yaml`` is
``configs/train.yaml`` plus ``length``, ``out_dir`` and ``wandb``, then
``pelab.assembly.build_model``), untrained, and each figure that applies to it is saved as a PNG in
``out_dir`` (default ``logs/inspect/<pe>/``; with ``ckpt_path``, ``<run dir>/inspect/``):

- ``absolute.png``: ``embed`` at positions ``0..length-1`` (positions x dims), for encodings
  that act on the embeddings: of zero token vectors where ``embed`` adds a vector per position,
  else (it transforms the token vector, as complex_order does) of one random token vector; an
  encoding that indexes digits (abacus) is fed one number of ``length`` digits (places 1..);
- ``cosine.png``: cosine similarity of those position vectors, as a matrix and against distance;
- ``layer_input.png``: for encodings injected at every block (FLOATER), ``layer_input`` of a zero
  residual stream per block (positions x dims), and its change from position 0;
- ``relative_<hook>.png``: what the attention hooks add as a function of the distance ``i - j``,
  one curve per head, in the first layer that runs the encoding (0, or a ``pe.layers``
  schedule's first: its title says so): the content-free ``logit_bias``; for ``transform_qk``
  (RoPE, xPos) the score ``q . k / sqrt(d)`` of one fixed random pair placed at every offset; for
  ``modify_logits`` the change of the logits when every position carries the same random
  ``q = k``; for ``modify_probs`` the factor by which uniform probabilities change;
- ``linear_map.png`` (sinusoids): the least-squares fit ``PE(pos + k) ~ PE(pos) M_k`` over many
  positions, whose residual is ~0 because a shift is a rotation of each sin/cos pair (Vaswani
  et al. 2017, section 3.5), and ``M_k`` itself.

Encodings of 2-D positions (``pe=rope_2d task=grid``, ...) get heatmaps instead, over offsets
``(Δrow, Δcol)`` in ``[-length/2, length/2]²``, one panel per head where there are heads:

- ``grid_cosine.png``: cosine similarity of ``embed`` of a zero vector at ``(row, col)`` to the
  same at the centre, for encodings that act on the embeddings;
- ``grid_relative_<hook>.png``: the ``logit_bias``, or the ``transform_qk`` score of one fixed
  random q, k pair, as a function of the offset ``(Δrow, Δcol)`` (query minus key).

With ``ckpt_path=<run dir>/checkpoints/best.ckpt`` the figures are those of the trained
encoding of that run (learned tables, biases and per-layer parameters as trained; the model and
its settings come from the run's record, as ``pelab.load_run`` loads it), and two more:

- ``attention_len<n>_<module>.png`` (``attention_len32_blocks.0.attn.png``): one attention
  module's probabilities on one test sample (teacher-forced), one panel per head, at the
  longest in-distribution evaluation length and the longest one beyond it: where the model
  looks when it extrapolates. Each the width of a column of a two-column paper (3.3 in, no text
  under 7 pt), integer position ticks. A colour bar gives the probability; dashed red lines mark
  the longest training sequence where the length passes it (the title says so only then).
  Recorded by ``pelab.models.attention_maps`` on either kernel.

A trained run's figures go to ``<run dir>/inspect/`` (``pelab.inspect.inspect_dir``), beside
its checkpoints, so the figures of two checkpoints never overwrite each other.

An untrained encoding whose learned parameters start constant (T5's zero bias table, CoPE's
zero position vectors, URPE's unit Toeplitz factors) draws flat curves: the console and the flat
figure's title say so, and ``<figure>_illustrative.png`` beside it draws the encoding with
illustrative values, titled "illustrative, not trained" (``pelab.inspect.untrained``).

With ``wandb=true`` the figures are logged as one W&B run too (``job_type=inspect``, in the
project and mode of ``logger=wandb``); by default only training and re-evaluation make W&B runs.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from pelab.assembly import build_model, build_task
from pelab.errors import ConfigError
from pelab.inspect.encoding_figures import draw, hook_figures
from pelab.inspect.pe_figures import (
    plot_attention,
)
from pelab.inspect.untrained import constant_parameters, illustrated, is_flat
from pelab.load import Run, load_run
from pelab.models.attention_maps import attention_maps
from pelab.pe.base import PositionalEncoding
from pelab.threads import check_threads, configure_threads


def flat_at_start(pe: PositionalEncoding, length: int) -> dict[str, list[str]]:
    """The hook figures of an untrained ``pe`` that are flat because learned parameters start
    constant, by figure name, each with those parameters: the ones whose illustrative values
    (``pelab.inspect.untrained``) make it vary. Empty for an encoding that draws no flat figure."""
    flat = {figure.name for figure in hook_figures(pe, length) if is_flat(figure.values)}
    causes: dict[str, list[str]] = {}
    for name in constant_parameters(pe) if flat else {}:
        for figure in hook_figures(illustrated(pe, [name])[0], length):
            if figure.name in flat and not is_flat(figure.values):
                causes.setdefault(figure.name, []).append(name)
    return causes


def starts(pe: PositionalEncoding, parameters: list[str]) -> str:
    """``parameters`` of ``pe`` and the one value each starts at: ``bias.weight = 0``."""
    values = constant_parameters(pe)
    return ", ".join(f"{name} = {values[name]:g}" for name in parameters)


def untrained_notice(pe: PositionalEncoding, causes: dict[str, list[str]], values: str) -> str:
    """The console's line on the flat figures ``causes`` (``flat_at_start``) of an untrained
    ``pe`` and their illustrations, which hold ``values``."""
    figures = ", ".join(causes)
    parameters = sorted({p for parameters in causes.values() for p in parameters})
    shown = ", ".join(f"{figure}_illustrative.png" for figure in causes)
    return (
        f"note: pe={pe.pe_name} is untrained and {starts(pe, parameters)} everywhere, so "
        f"{figures} {'is' if len(causes) == 1 else 'are'} flat: the encoding adds nothing there "
        f"until trained. Drawn with illustrative values, not trained, in {shown}: {values}. "
        "A trained run's encoding: inspect_pe.py "
        "ckpt_path=<run dir>/checkpoints/best.ckpt"
    )


def draw_untrained(pe: PositionalEncoding, out_dir: Path, length: int) -> list[Path]:
    """``draw`` for an untrained encoding: a figure left flat by parameters that start constant
    says so in its title and in the console, and ``<figure>_illustrative.png`` beside it draws
    the encoding with illustrative values of those parameters, titled as such."""
    causes = flat_at_start(pe, length)
    notes = {
        figure: f"flat: untrained, {starts(pe, parameters)} everywhere "
        f"(see {figure}_illustrative.png)"
        for figure, parameters in causes.items()
    }
    paths = draw(pe, out_dir, length, notes)
    if not causes:
        return paths
    shown, values = illustrated(pe, {p for parameters in causes.values() for p in parameters})
    note = f"ILLUSTRATIVE, NOT TRAINED: {values}"
    for figure in hook_figures(shown, length):
        if figure.name in causes:
            path = out_dir / f"{figure.name}_illustrative.png"
            figure.plot(path, note)
            paths.append(path)
    print(untrained_notice(pe, causes, values))
    return paths


def check_options(cfg: DictConfig) -> None:
    """``length`` a positive integer, ``wandb`` a boolean (true only with a W&B logger),
    ``threads`` auto or a positive integer, else a ``ConfigError``."""
    if isinstance(cfg.length, bool) or not isinstance(cfg.length, int) or cfg.length < 1:
        raise ConfigError(f"length={cfg.length!r}: expected a positive integer (positions drawn)")
    if not isinstance(cfg.wandb, bool):
        raise ConfigError(f"wandb={cfg.wandb!r}: valid choices: true, false")
    if cfg.wandb and OmegaConf.select(cfg, "logger.wandb") is None:
        raise ConfigError(
            "wandb=true logs the figures to W&B, but the logger is not W&B (logger=none or "
            "csv): drop wandb=true, or use logger=wandb"
        )
    check_threads(cfg.get("threads", "auto"))


def log_to_wandb(
    paths: list[Path], pe_name: str, out_dir: Path, config: dict, logger: DictConfig
) -> None:
    """One W&B run (``job_type=inspect``, in the project and mode of the W&B ``logger``
    section) with every figure as an image ``inspect/<name>``."""
    import wandb

    run = wandb.init(
        project=logger.project,
        job_type="inspect",
        name=f"inspect-{pe_name}",
        dir=str(out_dir),
        mode=logger.mode,
        config=config,
    )
    run.log({f"inspect/{path.stem}": wandb.Image(str(path)) for path in paths})
    run.finish()


def attention_figures(trained: Run, out_dir: Path) -> list[Path]:
    """``attention_len<n>_<module>.png`` of a trained model: one attention module's
    probabilities on one test sample (teacher-forced: the prompt, then the right answer), one
    panel per head, at the longest in-distribution evaluation length and at the longest length
    beyond it, if any; one figure per module, each the width of a paper's column
    (``plot_attention``)."""
    task, model = trained.task, trained.model
    trained_len = model.net.pe.dims.train_max_len or task.max_train_sequence_length()
    inside = [n for n in task.eval_lengths if task.in_distribution(n)]
    outside = [n for n in task.eval_lengths if not task.in_distribution(n)]
    paths = []
    for length in [max(inside)] + ([max(outside)] if outside else []):
        prompt, answer = task.sample(1, length, torch.Generator().manual_seed(length))
        positions = model.sequence_positions(prompt, answer.shape[1])
        with torch.no_grad(), attention_maps(model.net) as maps:
            model.kind.answer_logits(model.net, prompt, answer, positions)
        split = "in distribution" if task.in_distribution(length) else "beyond training"
        tokens, what = prompt.shape[1] + model.kind.markers, model.net.pe.pe_name
        for name, calls in maps.items():
            path = out_dir / f"attention_len{length}_{name}.png"
            title = f"{what} on {task.task_name}, {name}, length {length} ({split})"
            plot_attention(calls[0][0], tokens, title, path, trained_len)  # [h, i, j], sample 0
            paths.append(path)
    return paths


def run(cfg: DictConfig) -> list[Path]:
    """Build the encoding of ``cfg`` (``configs/inspect.yaml``), draw it into ``cfg.out_dir``,
    print and return the PNG paths; log them to W&B if ``cfg.wandb``. Untrained, a figure left
    flat by parameters that start constant is said so and illustrated (``draw_untrained``).
    With ``ckpt_path`` the encoding and model are the trained ones of that checkpoint's run
    (``pelab.load_run``), and the attention maps are drawn too (``attention_figures``)."""
    check_options(cfg)
    out_dir = Path(cfg.out_dir)
    threads = cfg.get("threads", "auto")
    if cfg.get("ckpt_path"):
        given = Path(cfg.ckpt_path)  # a checkpoint, or a run directory (its best.ckpt)
        if not given.exists():
            raise ConfigError(
                f"ckpt_path={given} does not exist: give a run directory or "
                "<run dir>/checkpoints/best.ckpt"
            )
        if given.is_dir():
            trained = load_run(given, threads=threads)
        else:
            trained = load_run(given.resolve().parent.parent, str(given), threads=threads)
        model = trained.model
    else:
        trained, model = None, build_model(cfg, build_task(cfg))
        configure_threads(cfg, model.net.num_params()["total"])
    pe = model.net.pe.eval()  # as evaluation computes it (no training draws: abacus's offset)
    with torch.no_grad():
        if trained is None:
            paths = draw_untrained(pe, out_dir, cfg.length)
        else:
            paths = draw(pe, out_dir, cfg.length) + attention_figures(trained, out_dir)
    for path in paths:
        print(path)
    if cfg.wandb:
        overrides = list(HydraConfig.get().overrides.task)
        config = {"pe": pe.pe_name, "overrides": overrides, "dims": asdict(pe.dims)}
        log_to_wandb(paths, pe.pe_name, out_dir, config, cfg.logger.wandb)
    return paths
