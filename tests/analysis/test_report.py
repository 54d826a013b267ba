"""The make_table command line in-process (the sweep -> table path runs in tests/test_cli.py)."""

import pytest

from pelab.analysis.report import main
from pelab.analysis.report_options import default_out


def test_sources_without_runs_exit_2_and_say_where_they_looked(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert f"error: no runs (results.json) under {tmp_path}" in capsys.readouterr().err
    assert not (tmp_path / "summary").exists()


def test_a_filter_without_a_value_and_an_unknown_metric_are_refused(tmp_path, capsys):
    for argv in (["--filter", "group"], ["--metric", "bleu"]):
        with pytest.raises(SystemExit) as exit_:
            main([str(tmp_path), *argv])
        assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "expected KEY=VALUE, got 'group'" in err and "invalid choice: 'bleu'" in err


def test_the_default_output_is_beside_the_first_source():
    assert str(default_out("logs/sweep")) == "logs/sweep/summary"
    assert str(default_out("wandb:me/pelab")) == "logs/summary/me_pelab"


def test_help_starts_with_usage_and_lists_every_option(capsys):
    """Issue 45: ``--help`` printed its baseline group before ``usage:``."""
    with pytest.raises(SystemExit):
        main(["--help"])
    printed = capsys.readouterr().out
    assert printed.startswith("usage: make_table.py")
    assert "--baseline NAME" in printed and "--filter KEY=VALUE" in printed


def test_no_wandb_still_runs_and_says_it_is_no_longer_needed(tmp_path, capsys):
    """Issue 45: ``--no-wandb``, documented before, had become an error."""
    assert main([str(tmp_path), "--no-wandb"]) == 2  # no runs there, but the flag is accepted
    err = capsys.readouterr().err
    assert "--no-wandb is no longer needed" in err and "unrecognized" not in err


def test_label_splits_at_the_last_equals_sign():
    from pelab.analysis.report_options import parse

    args = parse(["x", "--label", "rope · attn_scale=ssmax=RoPE + SSMax", "--label", "none=NoPE"])
    assert dict(args.label) == {"rope · attn_scale=ssmax": "RoPE + SSMax", "none": "NoPE"}
    with pytest.raises(SystemExit):
        parse(["x", "--label", "no-equals-sign"])
