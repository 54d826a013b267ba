"""What is read from pelab's Hydra config files (``configs/``) without building anything, so
that a script's ``--help`` and a bad override answer before torch loads (issue 35, item 9).

``eval_pe_options``, the node ``configs/eval.yaml`` composes first: every option an encoding's
config file sets (``configs/pe/<name>.yaml``) and the schedule's (``schedule_options``), null,
so ``pe.<option>=<value>`` parses in a re-evaluation of any encoding (null: keep the training
value); which options the checkpoint's encoding takes is checked when its model is rebuilt
(``pelab.evaluate``). A config file sets
every option of its encoding's constructor (``tests/test_configs.py``)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"


def encoding_options(pe_dir: Path = CONFIG_DIR / "pe") -> list[str]:
    """Every option any encoding's config file sets (Hydra's ``_target_``-style keys aside)."""
    return sorted(
        {
            str(key)
            for path in pe_dir.glob("*.yaml")
            for key in OmegaConf.load(path)
            if not str(key).startswith("_") and key != "defaults"
        }
    )


@functools.cache
def schedule_options() -> list[str]:
    """The options of every encoding that set its per-layer schedule (``pe.layers``,
    ``pelab.pe.layered``), not its constructor: ``configs/train.yaml``'s ``pe`` node."""
    return [str(key) for key in _load("train.yaml").pe]


@functools.cache
def added_defaults() -> dict[str, Any]:
    """The settings added after runs were recorded (the shipped baseline, checkpoints to
    resume), dotted, at the defaults their config files give: a record without one ran as at
    that value, so a comparison of protocols or a resume reads it so."""
    return {
        "model.net.attn_scale": _load("model/decoder.yaml").net.attn_scale,
        **{
            f"model.net.form.{key}": value
            for key, value in _load("model/decoder.yaml").net.form.items()
        },
        **{f"pe.{key}": value for key, value in _load("train.yaml").pe.items()},
        "data.curriculum_steps": _load("train.yaml").data.curriculum_steps,
    }


def preset_grid(preset: str) -> dict[str, list[str]]:
    """The encodings and tasks a preset's sweep expands to (``configs/experiment/<preset>.yaml``,
    ``hydra.sweeper.params``: a list or a ``glob(...)`` over the config files of the group), as
    Hydra's ``-m`` expands it: a new encoding's config file joins a globbed grid by itself."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = _load(f"experiment/{preset}.yaml").hydra.sweeper.params
    parser = OverridesParser.create()
    grid = {}
    for group in ("pe", "task"):
        value = parser.parse_override(f"{group}={params[group]}").value()
        files = sorted(path.stem for path in (CONFIG_DIR / group).glob("*.yaml"))
        grid[group] = value.filter(files) if hasattr(value, "filter") else list(value.list)
    return grid


def _load(path: str) -> DictConfig:
    return OmegaConf.load(CONFIG_DIR / path)


ConfigStore.instance().store(
    name="eval_pe_options", node={"pe": dict.fromkeys(encoding_options() + schedule_options())}
)
