"""Choose the W&B mode so that a run never prompts and never waits on a network.

``online`` needs credentials, found where W&B itself looks for them (its own lookup,
``wandb.sdk.lib.wbauth``, is not public API, so the same sources are checked here): the
environment (``WANDB_API_KEY``, ``WANDB_IDENTITY_TOKEN_FILE``), a ``.netrc`` entry for the
server (what ``wandb login`` writes) and an ``api_key`` in W&B's global settings file
(``$WANDB_CONFIG_DIR/settings``, default ``~/.config/wandb/settings``), and a server that
answers: W&B itself would wait ~90 s for an unreachable one before giving up, so the server is
probed first (a TCP connection, at most ``PROBE_TIMEOUT_S``) and a run whose server does not
answer logs offline, saying so. ``$WANDB_MODE`` wins otherwise. ``wandb_choice`` also says why,
for the run's first lines, and how to upload an offline run later (``SYNC_HINT``).

Each run keeps its W&B run id in ``<run dir>/wandb/run_id`` (``run_id``), so a run resumed in
its directory continues its W&B run instead of starting a second one.
"""

from __future__ import annotations

import configparser
import functools
import netrc
import os
import secrets
import socket
import string
import threading
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_HOST = "https://api.wandb.ai"
PROBE_TIMEOUT_S = 5.0
# every offline run under logs/ (runs live in logs/**/wandb/offline-run-*), from the repo root, in
# any shell, oldest first within a run (a resumed run's attempts share its id and continue its
# W&B run in order); `wandb sync` skips the runs it has uploaded (it marks them `.synced`)
SYNC_COMMAND = "find logs -type d -name 'offline-run-*' -print0 | sort -z | xargs -0r wandb sync"
SYNC_HINT = (
    "upload later, once logged in (`wandb login`, or $WANDB_API_KEY set), from the repo root "
    f"with `make sync` (or `{SYNC_COMMAND}`); W&B's own banner suggests `wandb online`, which "
    "only makes later runs log online"
)
RUN_ID_FILE = Path("wandb", "run_id")  # in a run's directory: the id of its W&B run
RUN_ID_ALPHABET = string.ascii_lowercase + string.digits


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
    credentials; else ``offline``. ``online`` becomes ``offline`` when the server does not
    answer."""
    if mode := os.environ.get("WANDB_MODE"):
        mode, why = mode, "set by $WANDB_MODE"
    elif source := credentials_source():
        mode, why = "online", f"W&B credentials found: {source}"
    else:
        return "offline", (
            "no W&B credentials ($WANDB_API_KEY, $WANDB_IDENTITY_TOKEN_FILE, ~/.netrc from "
            f"`wandb login`, an api_key in W&B's settings); {SYNC_HINT}"
        )
    server = os.environ.get("WANDB_BASE_URL", DEFAULT_HOST)
    if mode == "online" and (failure := unreachable(server)) is not None:
        return "offline", (
            f"{why}, but the W&B server {server} does not answer ({failure}): logging offline; "
            + SYNC_HINT
        )
    return mode, why


@functools.lru_cache(maxsize=8)
def unreachable(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None if a TCP connection to ``url``'s host opens within ``timeout_s``, else why not
    (name resolution included: the probe runs in a thread that is given up on)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    outcome: dict[str, BaseException | None] = {}

    def connect() -> None:
        try:
            with socket.create_connection((parts.hostname, port), timeout=timeout_s):
                outcome["error"] = None
        except OSError as error:
            outcome["error"] = error

    probe = threading.Thread(target=connect, daemon=True)
    probe.start()
    probe.join(timeout_s)
    if "error" not in outcome:
        return f"no answer within {timeout_s:g} s"
    error = outcome["error"]
    return None if error is None else f"{type(error).__name__}: {error}"


def wandb_mode() -> str:
    """The mode alone (the config's ``${wandb_mode:}`` resolver)."""
    return wandb_choice()[0]


def run_id(run_dir: str | Path) -> str:
    """The W&B run id of the run in ``run_dir``, kept in ``<run_dir>/wandb/run_id``:
    ``$WANDB_RUN_ID`` if set (a W&B sweep agent sets it), else the id an earlier attempt kept (a
    resumed run continues its W&B run), else a new one drawn as W&B draws its ids."""
    path = Path(run_dir) / RUN_ID_FILE
    kept = path.read_text().strip() if path.is_file() else ""
    chosen = os.environ.get("WANDB_RUN_ID") or kept
    chosen = chosen or "".join(secrets.choice(RUN_ID_ALPHABET) for _ in range(8))
    if chosen != kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(chosen + "\n")
    return chosen


def forget_run_id(run_dir: str | Path) -> None:
    """Forget the W&B run id kept in ``run_dir``: a run trained from scratch there
    (``resume=false``, or no checkpoint yet) opens a W&B run of its own instead of continuing an
    earlier attempt's, which would mix two trainings' histories (W&B drops steps logged out of
    order)."""
    (Path(run_dir) / RUN_ID_FILE).unlink(missing_ok=True)
