"""The errors a user can act on: ``ConfigError`` for bad input (every module imports it from
here), the refusal of a value its ``Literal`` type does not list (``not_a_choice``, checked for
a constructor by ``choices_checked``), and ``storage_fault`` for a disk that refuses a write."""

from __future__ import annotations

import errno
import functools
import inspect
import math
import os
import shutil
import sys
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

STORAGE_FAULTS = {
    errno.ENOSPC: "no space left on device (disk full)",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EFBIG: "file too large for this file system or limit",
}


class ConfigError(ValueError):
    """A configuration that cannot work, reported before any training starts: the message names
    the bad value and the valid choices."""


def not_a_choice(key: str, value: Any, choices: Iterable[Any]) -> ConfigError:
    """``pe.layout='spiral' is not a choice; valid choices: interleaved, concat`` (choices as
    YAML writes them: ``null``, ``true``)."""
    words = ", ".join(
        "null" if c is None else str(c).lower() if isinstance(c, bool) else str(c) for c in choices
    )
    return ConfigError(f"{key}={value!r} is not a choice; valid choices: {words}")


def literal_choices(hint: Any) -> tuple[Any, ...]:
    """The values a ``Literal[...]`` type lists (of ``Literal[...] | None``: and None); () for
    any other type."""
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        parts = [(None,) if a is type(None) else literal_choices(a) for a in typing.get_args(hint)]
        if all(parts):
            return tuple(c for part in parts for c in part)
    return ()


def check_choices(owner: Callable[..., Any], section: str, values: Mapping[str, Any]) -> None:
    """``not_a_choice`` (named ``<section>.<name>``) for the first of ``values`` whose
    ``Literal`` annotation in ``owner`` (a function, or a dataclass's fields) does not list it."""
    for name, valid in _literal_annotations(owner).items():
        if name in values and values[name] not in valid:
            raise not_a_choice(f"{section}.{name}", values[name], valid)


def choices_checked(section: str) -> Callable[[F], F]:
    """A decorator: the function (a constructor) refuses an argument that its ``Literal``
    annotation does not list before its body runs (``check_choices``). A registered encoding's
    or task's constructor has it from its registration (``register_pe``, ``register_task``); a
    config meets the same annotations earlier, before anything is built
    (``pelab.reliability.checks.validate``)."""

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def checked(*args: Any, **kwargs: Any) -> Any:
            if _literal_annotations(function):
                try:
                    bound = inspect.signature(function).bind(*args, **kwargs)
                except TypeError:
                    pass  # a call the function itself refuses, as Python words it
                else:
                    check_choices(function, section, bound.arguments)
            return function(*args, **kwargs)

        return typing.cast(F, checked)

    return decorate


@functools.cache
def _literal_annotations(owner: Callable[..., Any]) -> dict[str, tuple[Any, ...]]:
    """``owner``'s names annotated with a ``Literal`` type, and the values each lists (read when
    first needed: the module has defined its names by then; one that does not evaluate is
    skipped)."""
    namespace = getattr(inspect.unwrap(owner), "__globals__", None)
    if namespace is None:
        namespace = vars(sys.modules[owner.__module__])
    found = {}
    for name, annotation in inspect.get_annotations(owner).items():
        if isinstance(annotation, str):
            try:
                annotation = eval(annotation, namespace)  # as typing.get_type_hints does
            except Exception:
                continue
        if valid := literal_choices(annotation):
            found[name] = valid
    return found


def storage_fault(error: BaseException) -> str | None:
    """What a disk refused, if that is why ``error`` happened (anywhere in its chain of causes,
    e.g. under torch's ``RuntimeError: [enforce fail at inline_container.cc]``): ``cannot write
    <file>: no space left on device (disk full); 0 B free there`` and what to do; None
    otherwise."""
    for cause in causes(error):
        if isinstance(cause, OSError) and cause.errno in STORAGE_FAULTS:
            what = STORAGE_FAULTS[cause.errno]
            where = cause.filename or getattr(error, "filename", None)
            target = f"cannot write {where}" if where else "a write failed"
            full = cause.errno in (errno.ENOSPC, errno.EDQUOT)
            if full and where:
                what += f"; {_free(str(where))} free there"
            remedy = "Free space or choose" if full else "Choose"
            return (
                f"{target}: {what}. {remedy} another output directory (hydra.run.dir=..., "
                "hydra.sweep.dir=...), then run the same command again (an interrupted run "
                "resumes from its last checkpoint)"
            )
    return None


def causes(error: BaseException | None) -> Iterator[BaseException]:
    """``error`` and its causes and contexts, each once."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _free(path: str) -> str:
    directory = path if os.path.isdir(path) else os.path.dirname(path) or "."
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return "unknown"
    power = min(int(math.log(max(free, 1), 1024)), 3)  # B, KiB, MiB, GiB
    return f"{free} B" if power == 0 else f"{free / 1024**power:.1f} {'BKMG'[power]}iB"
