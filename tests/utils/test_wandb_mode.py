import pytest

from pelab.train import run
from pelab.utils.wandb_mode import wandb_choice, wandb_mode


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "no-config"))
    return tmp_path / "netrc"


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


def test_the_run_says_which_mode_it_chose_and_why(tiny_cfg, caplog):
    with caplog.at_level("INFO", logger="pelab.runner"):
        run(tiny_cfg("logger=wandb"))
    assert "W&B: offline mode (set by $WANDB_MODE)" in caplog.text
