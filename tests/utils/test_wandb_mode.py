import pytest

from pelab.utils.wandb_mode import wandb_mode


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
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
