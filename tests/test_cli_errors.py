"""A user's mistake on the command line: one line naming the bad value, a guess, the valid
choices, and nothing left behind."""

import pytest
from hydra.errors import MissingConfigException

from pelab.cli import user_message
from pelab.errors import ConfigError
from pelab.models.dims import check_sizes
from tests.test_cli import cli


def test_a_misspelt_choice_gets_a_guess():
    error = MissingConfigException("...", missing_cfg_file="pe/ropee", options=["alibi", "rope"])
    message = user_message(error)
    assert message.startswith("pe=ropee is not an option of pe; did you mean rope?")
    assert message.endswith("valid choices: alibi, rope")


def test_heads_that_do_not_divide_the_width_list_the_valid_ones():
    try:
        check_sizes(64, 3, 2)
    except ConfigError as error:
        assert "model.net.n_heads=3" in str(error)
        assert "valid model.net.n_heads for d_model=64: 1, 2, 4, 8, 16, 32, 64" in str(error)
    else:
        raise AssertionError("no error")


@pytest.mark.processes
@pytest.mark.integration
def test_a_config_error_leaves_no_run_directory_behind(repo_root, tmp_path):
    out = tmp_path / "run"
    proc = cli(
        repo_root,
        "scripts/train.py",
        "model.net.n_heads=3",
        "logger=csv",
        f"hydra.run.dir={out}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        timeout=300,
    )
    assert proc.returncode == 1
    assert "valid model.net.n_heads for d_model=64" in proc.stderr
    assert not out.exists()
