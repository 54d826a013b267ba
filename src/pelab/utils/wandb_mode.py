"""Choose the W&B mode so that a run never prompts and never waits on a network."""

from __future__ import annotations

import netrc
import os
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_HOST = "https://api.wandb.ai"


def has_wandb_credentials() -> bool:
    """True if W&B would find an API key: ``WANDB_API_KEY`` or a ``.netrc`` entry (what
    ``wandb login`` writes) for ``WANDB_BASE_URL``'s host."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlsplit(os.environ.get("WANDB_BASE_URL", DEFAULT_HOST)).hostname
    path = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        return path.is_file() and netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def wandb_mode() -> str:
    """``$WANDB_MODE`` if set; else ``online`` when credentials exist; else ``offline``."""
    return os.environ.get("WANDB_MODE") or ("online" if has_wandb_credentials() else "offline")
