"""How pelab's Hydra scripts end on a user's mistake: one line naming the bad value and the valid
choices, with no traceback, and exit status 1. ``HYDRA_FULL_ERROR=1`` shows the traceback.

A mistake is pelab's ``ConfigError`` (raised anywhere, also wrapped by Hydra's ``instantiate``),
a disk that refuses a write (full, read-only: ``pelab.errors.storage_fault``) or one of Hydra's
own compact errors (an unknown config group option, an override it cannot
parse, a key that is not in the config: for this one pelab adds the valid keys). Anything else
is a bug or a fault, and keeps its full traceback."""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Callable
from typing import Any

from hydra.errors import (
    CompactHydraException,
    ConfigCompositionException,
    MissingConfigException,
)
from omegaconf import DictConfig
from omegaconf.errors import ConfigAttributeError, ConfigKeyError

from pelab.errors import ConfigError, causes, storage_fault
from pelab.reliability.checks.validate import not_a_key

FULL_ERROR = "HYDRA_FULL_ERROR"


def run_script(main: Callable[[], Any]) -> None:
    """Run a script's ``@hydra.main`` function with pelab's error reporting."""
    if os.environ.get(FULL_ERROR) == "1":
        main()
        return
    os.environ[FULL_ERROR] = "1"  # Hydra re-raises what it would print with a partial traceback
    try:
        main()
    except Exception as error:
        message = user_message(error)
        if message is None:
            raise
        print(f"Error: {message}\n({FULL_ERROR}=1 shows the traceback)", file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        os.environ.pop(FULL_ERROR, None)


def user_message(error: BaseException) -> str | None:
    """The one-line report of a user's mistake; None for anything else."""
    for cause in causes(error):
        if isinstance(cause, ConfigError):
            return str(cause)
    if (fault := storage_fault(error)) is not None:
        return fault
    if isinstance(error, ConfigCompositionException) and isinstance(
        error.__cause__, (ConfigAttributeError, ConfigKeyError)
    ):
        return unknown_key(error.__cause__) or str(error)
    if isinstance(error, MissingConfigException) and error.options and error.missing_cfg_file:
        group, _, name = error.missing_cfg_file.rpartition("/")
        close = difflib.get_close_matches(name, error.options, n=1)
        guess = f"; did you mean {close[0]}?" if close else ""
        return f"{group}={name} is not an option of {group}{guess}; valid choices: " + ", ".join(
            error.options
        )
    if isinstance(error, CompactHydraException):
        return str(error)
    return None


def unknown_key(error: ConfigAttributeError | ConfigKeyError) -> str | None:
    """A key Hydra could not set (``model.optimzer.lr=1``), with the valid keys beside it."""
    parent, full_key = error.parent_node, str(error.full_key or "")
    if not isinstance(parent, DictConfig) or not full_key:
        return None
    keys = [str(k) for k in parent.keys()]
    return f"{not_a_key(full_key, keys)} (+{full_key}=<value> adds a new key)"
