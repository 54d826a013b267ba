import socket
import time

import pytest

from pelab.train import run
from pelab.utils import wandb_mode as wandb_mode_module
from pelab.utils.wandb_mode import unreachable, wandb_choice, wandb_mode


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No W&B settings from the machine; the W&B server answers (see the probe's own tests)."""
    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "no-config"))
    monkeypatch.setattr(wandb_mode_module, "unreachable", lambda url: None)
    return tmp_path / "netrc"


@pytest.fixture
def listening_server():
    """A local TCP server that accepts connections (the kernel completes them)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    server.close()


def test_the_probe_finds_a_server_that_answers_and_names_one_that_does_not(listening_server):
    unreachable.cache_clear()
    assert unreachable(listening_server) is None
    failure = unreachable("http://wandb.invalid")  # a reserved name: never resolves
    assert failure.startswith("gaierror") or failure.startswith("no answer within")


@pytest.mark.faults
def test_a_probe_that_hangs_is_given_up_on_in_bounded_time(monkeypatch):
    unreachable.cache_clear()
    monkeypatch.setattr(socket, "create_connection", lambda *args, **kwargs: time.sleep(30))
    start = time.monotonic()
    assert unreachable("http://api.example", timeout_s=0.3) == "no answer within 0.3 s"
    assert time.monotonic() - start < 2


@pytest.mark.faults
def test_online_without_a_server_that_answers_logs_offline_and_says_why(monkeypatch, tmp_path):
    """Credentials but no network: W&B itself would wait ~90 s; pelab logs offline at once."""
    unreachable.cache_clear()
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_BASE_URL", "http://wandb.invalid")
    mode, why = wandb_choice()
    assert mode == "offline"
    assert why.startswith("set by $WANDB_MODE, but the W&B server http://wandb.invalid does not")
    assert why.endswith("logging offline; upload later with `wandb sync`")


def test_wandb_is_offline_without_credentials(clean_env):
    assert wandb_mode() == "offline"


def test_wandb_goes_online_after_login(clean_env):
    clean_env.write_text("machine api.wandb.ai\n  login user\n  password abc123\n")
    assert wandb_mode() == "online"


def test_wandb_online_with_an_api_key_and_explicit_mode_wins(clean_env, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "abc")
    assert wandb_mode() == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode() == "disabled"


def test_a_broken_netrc_means_offline_not_a_crash(clean_env):
    clean_env.write_text("machine\n")
    assert wandb_mode() == "offline"


def test_every_source_w_and_b_reads_credentials_from_counts_and_is_named(
    clean_env, monkeypatch, tmp_path
):
    """Besides the API key and ``.netrc``: an identity token file and W&B's settings file
    (``api_key`` under ``[default]``); the reason names the source."""
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "config"))
    assert wandb_choice()[0] == "offline" and "wandb sync" in wandb_choice()[1]
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "settings").write_text("[default]\napi_key = abc123\n")
    mode, why = wandb_choice()
    assert mode == "online" and "settings holds an api_key" in why
    (tmp_path / "config" / "settings").write_text("[default]\nentity = me\n")
    assert wandb_mode() == "offline"
    monkeypatch.setenv("WANDB_IDENTITY_TOKEN_FILE", str(tmp_path / "token"))
    assert wandb_choice() == ("online", "W&B credentials found: $WANDB_IDENTITY_TOKEN_FILE is set")
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert wandb_choice() == ("offline", "set by $WANDB_MODE")


@pytest.mark.integration
def test_the_run_says_which_mode_it_chose_and_why(tiny_cfg, caplog):
    with caplog.at_level("INFO", logger="pelab.runner"):
        run(tiny_cfg("logger=wandb"))
    assert "W&B: offline mode (set by $WANDB_MODE)" in caplog.text
