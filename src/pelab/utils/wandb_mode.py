"""Choose the W&B mode so that a run never prompts and never waits on a network.

``online`` needs credentials, found where W&B itself looks for them (its own lookup,
``wandb.sdk.lib.wbauth``, is not public API, so the same sources are checked here): the
environment (``WANDB_API_KEY``, ``WANDB_IDENTITY_TOKEN_FILE``), a ``.netrc`` entry for the
server (what ``wandb login`` writes) and an ``api_key`` in W&B's global settings file
(``$WANDB_CONFIG_DIR/settings``, default ``~/.config/wandb/settings``). ``$WANDB_MODE`` always
wins. ``wandb_choice`` also says why, for the run's first lines.
"""

from __future__ import annotations

import configparser
import netrc
import os
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_HOST = "https://api.wandb.ai"


def credentials_source() -> str | None:
    """Where W&B would find credentials for ``WANDB_BASE_URL``'s server, or None."""
    for var in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE"):
        if os.environ.get(var):
            return f"${var} is set"
    host = urlsplit(os.environ.get("WANDB_BASE_URL", DEFAULT_HOST)).hostname
    path = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        if path.is_file() and netrc.netrc(path).authenticators(host) is not None:
            return f"{path} has a login for {host} (wandb login)"
    except (OSError, netrc.NetrcParseError):
        pass
    config_dir = os.environ.get("WANDB_CONFIG_DIR") or Path.home() / ".config" / "wandb"
    settings = configparser.ConfigParser()
    try:
        settings.read(Path(config_dir) / "settings")
    except configparser.Error:
        return None
    if settings.get("default", "api_key", fallback=None):
        return f"{Path(config_dir) / 'settings'} holds an api_key"
    return None


def wandb_choice() -> tuple[str, str]:
    """The mode and why: ``$WANDB_MODE`` if set; else ``online`` when W&B would find
    credentials; else ``offline``."""
    if mode := os.environ.get("WANDB_MODE"):
        return mode, "set by $WANDB_MODE"
    if source := credentials_source():
        return "online", f"W&B credentials found: {source}"
    return "offline", (
        "no W&B credentials ($WANDB_API_KEY, $WANDB_IDENTITY_TOKEN_FILE, ~/.netrc from "
        "`wandb login`, an api_key in W&B's settings); upload later with `wandb sync`"
    )


def wandb_mode() -> str:
    """The mode alone (the config's ``${wandb_mode:}`` resolver)."""
    return wandb_choice()[0]
