"""Settings checked against the code they configure, before anything is built: every node with a
``_target_`` must name only options its target accepts, each of the type the target declares.

Types come from the target's annotations (``int``, ``float``, ``bool``, ``str``, ``Literal``,
``X | None``, ``Sequence[X]``, ``tuple[X, Y]``, ``dict``); a hint that cannot be read, or a type
a YAML value cannot have, is not checked here (the target's own checks still run). A value
outside its ``Literal`` is refused as its constructor refuses it (``pelab.errors.not_a_choice``).
A target whose options are another class's (``configured_by``: a network's ``model.net`` keys
are its ``NetDims``'s fields) is checked against that class.
"""

from __future__ import annotations

import collections.abc
import difflib
import inspect
import types
import typing
from collections.abc import Iterator, Sequence
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import OverrideType
from hydra.utils import get_object
from omegaconf import MISSING, DictConfig, OmegaConf

from pelab.config_files import schedule_options
from pelab.errors import ConfigError, literal_choices, not_a_choice

SKIPPED_SECTIONS = ("hydra",)
# sections whose entries are user-named instantiables (``+callbacks.fault._target_=...``)
OPEN_SECTIONS = ("callbacks", "logger", "hydra")
# Settings read by pelab itself, or whose target's annotations say too little (torch's optimizer,
# Lightning's validation interval): key -> (type, the valid range as a test and in words).
PLAIN: dict[str, tuple[type, typing.Callable[[Any], bool] | None, str]] = {
    "seed": (int, None, ""),
    "learned_at": (float, None, ""),  # pelab.competence checks its range
    "learned_patience": (int, lambda v: v >= 1, ">= 1"),
    "data.batch_size": (int, lambda v: v >= 1, ">= 1"),
    "data.eval_batch_size": (int, lambda v: v >= 1, ">= 1"),
    "data.num_workers": (int, lambda v: v >= 0, ">= 0 (0: batches made in the training process)"),
    "data.curriculum_steps": (int, lambda v: v >= 0, ">= 0 (0: no length curriculum)"),
    "model.compile": (bool, None, ""),
    "model.optimizer.lr": (float, lambda v: v > 0, "> 0, e.g. 3e-3"),
    "model.schedule.warmup_steps": (int, lambda v: v >= 0, ">= 0"),
    "model.schedule.min_lr_ratio": (float, lambda v: 0 <= v <= 1, "in [0, 1]"),
    "model.schedule.decay_at": (float, lambda v: 0 < v <= 1, "in (0, 1], or null"),
    "model.schedule.decay_steps": (int, lambda v: v >= 1, ">= 1"),
    "model.net.dropout": (float, lambda v: 0 <= v < 1, "in [0, 1)"),
    "model.net.d_ff": (int, lambda v: v >= 1, ">= 1 (null: 4 * d_model)"),
    "trainer.val_check_interval": (int, lambda v: v >= 1, ">= 1: validate every N steps"),
    "pe.nope_temperature": (float, lambda v: v >= 0, ">= 0 (0: off)"),
    "pe.nope_temperature_length": (int, lambda v: v >= 1, ">= 1"),
}


def check_types(cfg: DictConfig, overrides: Sequence[str] | None = None) -> None:
    """A ``ConfigError`` for the first option, anywhere in ``cfg``, that its ``_target_`` does not
    accept or whose value has the wrong type or lies outside its range (``PLAIN``); names the
    key, the value and the valid choices. A required value left unset (``???`` in a config, e.g.
    ``task.path`` of ``from_dataset``) is named first, then a key added (``+key=value``) where
    pelab reads no such key. ``overrides``: the command line's (default: Hydra's, if running)."""
    unresolved = OmegaConf.to_container(cfg, resolve=False)
    missing = sorted(k for k in missing_keys(unresolved) if not k.startswith(SKIPPED_SECTIONS))
    if missing:
        raise ConfigError(
            f"{', '.join(missing)}: required, with no default; set it on the command line "
            f"({missing[0]}=<value>)"
        )
    check_added_keys(cfg, _command_line() if overrides is None else overrides)
    for key, (kind, valid, words) in PLAIN.items():
        value = OmegaConf.select(cfg, key, default=None)
        if value is None:
            continue
        if not matches(value, kind):
            raise ConfigError(f"{key}={value!r} has the wrong type: expected {kind.__name__}")
        if valid is not None and not valid(value):
            raise ConfigError(f"{key}={value!r} is out of range: it must be {words}")
    config = OmegaConf.to_container(cfg, resolve=True)
    if isinstance(config.get("pe"), dict):  # options of every encoding, not of its constructor
        for key in schedule_options():
            config["pe"].pop(key, None)
    for key, value in config.items():
        if key not in SKIPPED_SECTIONS:
            _walk(str(key), value)


def missing_keys(config: Any, key: str = "") -> Iterator[str]:
    """The keys of ``config`` (a container, unresolved) whose value is ``???``, as
    ``OmegaConf.missing_keys`` names them (``a.b``, ``a[0]``), without resolving every
    interpolation on the way as it does (a third of this check's time)."""
    if isinstance(config, dict):
        for name, value in config.items():
            yield from missing_keys(value, f"{key}.{name}" if key else str(name))
    elif isinstance(config, list):
        for index, value in enumerate(config):
            yield from missing_keys(value, f"{key}[{index}]")
    elif config == MISSING:
        yield key


def check_added_keys(cfg: DictConfig, overrides: Sequence[str]) -> None:
    """Every key pelab reads has a default in ``configs/``, so a key added with ``+key=value``
    (or ``++``) is a typo, except under a ``_target_`` (the target's signature decides, in
    ``check_types``), in the open sections (``OPEN_SECTIONS``) or as a config group
    (``+experiment=...``)."""
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        if override.type not in (OverrideType.ADD, OverrideType.FORCE_ADD):
            continue
        key = override.key_or_group
        parts = key.split(".")
        if parts[0] in OPEN_SECTIONS or OmegaConf.select(cfg, key, default=_ABSENT) is _ABSENT:
            continue  # an open section, or a config group (it adds no key of its name)
        prefixes = [".".join(parts[: i + 1]) for i in range(len(parts))]
        nodes = [cfg] + [OmegaConf.select(cfg, prefix) for prefix in prefixes]
        if any(isinstance(n, DictConfig) and "_target_" in n for n in nodes[:-1]):
            continue
        depth = len(parts) - 1  # the first part the addition created: its parent has others
        while depth > 0 and len(nodes[depth]) == 1:
            depth -= 1
        keys = [str(k) for k in nodes[depth].keys() if k != parts[depth]]
        raise ConfigError(f"+{key}: {not_a_key('.'.join(parts[: depth + 1]), keys)}")


def not_a_key(full_key: str, keys: Sequence[str]) -> str:
    """``model.optimzer is not a key of model; did you mean optimizer?; valid keys: ...``."""
    where, _, name = full_key.rpartition(".")
    close = difflib.get_close_matches(name, keys, n=1)
    guess = f"; did you mean {close[0]}?" if close else ""
    return (
        f"{full_key} is not a key of {where or 'the config'}{guess}; "
        f"valid keys: {', '.join(sorted(keys))}"
    )


def _command_line() -> list[str]:
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


_ABSENT = object()


def _walk(path: str, node: Any) -> None:
    if isinstance(node, dict):
        if "_target_" in node:
            _check_node(path, node)
        for key, value in node.items():
            if not str(key).startswith("_"):
                _walk(f"{path}.{key}", value)


def _check_node(path: str, node: dict[str, Any]) -> None:
    try:
        target = get_object(node["_target_"])
    except Exception as error:
        raise ConfigError(
            f"{path}._target_={node['_target_']!r} cannot be imported: {error}"
        ) from None
    name = getattr(target, "__name__", str(target))
    params, hints, open_ended = signature(getattr(target, "configured_by", target))
    options = list(params)
    for key, value in node.items():
        if key.startswith("_"):
            continue
        if key not in params:
            if open_ended:
                continue
            raise ConfigError(
                f"{path}.{key} is not an option of {name}; valid options: {', '.join(options)}"
            )
        hint = hints.get(key)
        if hint is not None and not matches(value, hint):
            if choices := literal_choices(hint):
                raise not_a_choice(f"{path}.{key}", value, choices)
            raise ConfigError(
                f"{path}.{key}={value!r} has the wrong type: {name} expects {describe(hint)}"
            )


def signature(target: Any) -> tuple[dict[str, inspect.Parameter], dict[str, Any], bool]:
    """The options ``target`` accepts, their type hints, and whether it takes any other option.
    A class that forwards ``**kwargs`` to its base (``XPosPE`` to ``RotaryPE``, a task to
    ``Task``) accepts its bases' options too."""
    functions = (
        [vars(k)["__init__"] for k in target.__mro__ if "__init__" in vars(k)]
        if inspect.isclass(target)
        else [target]
    )
    params: dict[str, inspect.Parameter] = {}
    hints: dict[str, Any] = {}
    for function in functions:
        try:
            found = inspect.signature(function).parameters
        except (TypeError, ValueError):
            return params, hints, True
        try:
            hints = {**typing.get_type_hints(function), **hints}  # the subclass's hint wins
        except Exception:  # annotations naming what only a type checker imports
            pass
        for name, p in found.items():
            if name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                params.setdefault(name, p)
        if not any(p.kind is p.VAR_KEYWORD for p in found.values()):
            return params, hints, False
    return params, hints, True


def matches(value: Any, hint: Any) -> bool:
    """Whether a YAML value ``value`` fits the annotation ``hint`` (unknown hints: True)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is typing.Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(matches(value, a) for a in args)
    if origin is typing.Literal:
        return value in args
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin is tuple and args:
        if not isinstance(value, (list, tuple)):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(matches(v, args[0]) for v in value)
        return len(value) == len(args) and all(
            matches(v, a) for v, a in zip(value, args, strict=True)
        )
    if origin in (list, tuple, collections.abc.Sequence, collections.abc.MutableSequence):
        item = args[0] if args else typing.Any
        return isinstance(value, (list, tuple)) and all(matches(v, item) for v in value)
    if origin in (dict, collections.abc.Mapping) or hint is dict:
        return isinstance(value, dict)
    return True  # a class a YAML value cannot be (a tensor, a callable): checked by the target


def describe(hint: Any) -> str:
    """A type in words (a ``Literal``'s values are refused by ``not_a_choice`` instead)."""
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
