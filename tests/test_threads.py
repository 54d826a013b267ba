"""``pelab.threads``: torch's CPU threads chosen for the work, and said in one log line."""

import pytest
import torch
from omegaconf import OmegaConf

import pelab.evaluate  # noqa: F401 (stores eval.yaml's eval_pe_options)
from pelab import threads
from pelab.errors import ConfigError
from pelab.threads import (
    AUTO_CAP,
    ONE_THREAD_BELOW,
    choose_threads,
    configure_threads,
    set_threads,
    share_cores,
)
from tests.conftest import compose_config

SMALL = 104_064  # the default model: decoder, d_model 64, 2 layers
LARGE = 18_938_880  # d_model 512, 6 layers


@pytest.fixture(autouse=True)
def interop(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """No ``OMP_NUM_THREADS``, no launcher's share; torch's threads restored after the test, and
    its inter-op threads (settable once per process) recorded instead of set."""
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "_job_cores", None)
    calls: list[int] = []
    monkeypatch.setattr(torch, "set_num_interop_threads", calls.append)
    yield calls
    torch.set_num_threads(before)


def test_a_small_model_gets_one_thread_and_the_log_says_why():
    chosen, why = choose_threads("auto", SMALL, cores=16)
    assert chosen == 1
    assert why == (
        "model of 0.1M parameters: below 5M a second thread gains < 2x on an idle machine and "
        "can cost up to 75x on a busy one, docs/performance.md; threads=<n> overrides"
    )
    assert choose_threads("auto", ONE_THREAD_BELOW - 1, cores=16)[0] == 1


@pytest.mark.parametrize(("cores", "expected"), [(1, 1), (2, 2), (4, 4), (64, AUTO_CAP)])
def test_a_large_model_gets_every_core_up_to_the_cap(cores, expected):
    chosen, why = choose_threads("auto", LARGE, cores=cores)
    assert chosen == expected
    assert why.startswith(f"model of 19M parameters, {cores} cores")
    assert (f"at most {AUTO_CAP}" in why) == (cores > AUTO_CAP)
    assert choose_threads("auto", ONE_THREAD_BELOW, cores=cores)[0] == expected


def test_an_unknown_model_size_is_treated_as_a_large_one():
    assert choose_threads("auto", None, cores=2) == (
        2,
        "model size not known, 2 cores, docs/performance.md; threads=<n> overrides",
    )


def test_a_number_is_honoured_as_given_even_beyond_the_cores():
    assert choose_threads(1, LARGE, cores=16) == (1, "threads=1 as configured")
    assert choose_threads(3, SMALL, cores=2) == (
        3,
        "threads=3 as configured, more than the 2 cores: they compete",
    )


def test_auto_respects_omp_num_threads_and_a_number_overrides_it(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert choose_threads("auto", SMALL, cores=2) == (
        3,
        "OMP_NUM_THREADS=3 set in the environment; threads=<n> overrides",
    )
    assert choose_threads("auto", LARGE, cores=16)[0] == 3
    assert choose_threads(2, SMALL, cores=16)[0] == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "4,2")  # one count per nesting level: the first
    assert choose_threads("auto", SMALL, cores=2)[0] == 4
    monkeypatch.setenv("OMP_NUM_THREADS", "many")  # not a count: the rule applies
    assert choose_threads("auto", SMALL, cores=2)[0] == 1


@pytest.mark.parametrize("bad", ["all", "2", 0, -1, 2.5, True, None])
def test_a_bad_value_is_refused_with_the_valid_choices(bad):
    with pytest.raises(ConfigError) as error:
        choose_threads(bad, SMALL)
    assert str(error.value).startswith(f"threads={bad!r}: valid choices: auto (")
    assert "or a positive integer (that many torch threads)" in str(error.value)


def test_within_a_launchers_share_auto_chooses_at_most_the_share():
    share_cores(1)
    assert choose_threads("auto", LARGE) == (
        1,
        "model of 19M parameters, this job's share of the cores: 1, docs/performance.md; "
        "threads=<n> overrides",
    )
    share_cores(3)  # threads_per_job=3: the launcher's choice, whatever the cores
    assert choose_threads("auto", LARGE)[0] == min(3, AUTO_CAP)
    assert choose_threads("auto", SMALL)[0] == 1
    assert choose_threads(2, SMALL)[0] == 2
    share_cores(None)
    assert choose_threads("auto", LARGE)[0] == min(threads.available_cores(), AUTO_CAP)


def test_set_threads_sets_torchs_threads_and_logs_one_line(caplog, interop):
    with caplog.at_level("INFO", logger="pelab.threads"):
        assert set_threads("auto", SMALL) == 1
    assert torch.get_num_threads() == 1
    [record] = caplog.records
    assert record.getMessage().startswith("torch threads: 1 (model of 0.1M parameters: ")
    assert interop == ([1] if torch.get_num_interop_threads() != 1 else [])
    assert set_threads(2, SMALL) == 2 and torch.get_num_threads() == 2


def test_torch_refusing_the_inter_op_threads_is_no_error(monkeypatch):
    def refuse(n: int) -> None:
        raise RuntimeError("cannot set number of interop threads after parallel work started")

    monkeypatch.setattr(torch, "set_num_interop_threads", refuse)
    monkeypatch.setattr(torch, "get_num_interop_threads", lambda: 7)
    assert set_threads(1, SMALL) == 1 and torch.get_num_threads() == 1


def test_configure_threads_reads_the_configs_threads():
    assert configure_threads(OmegaConf.create({"threads": 2}), SMALL) == 2
    assert torch.get_num_threads() == 2
    assert configure_threads(OmegaConf.create({}), SMALL) == 1  # no key: auto
    with pytest.raises(ConfigError, match="threads='two': valid choices"):
        configure_threads(OmegaConf.create({"threads": "two"}), SMALL)


@pytest.mark.parametrize("config", ["train", "eval", "inspect"])
def test_every_entry_points_config_has_threads_auto(config, tmp_path):
    assert compose_config([], tmp_path, config_name=config).threads == "auto"
    assert compose_config(["threads=3"], tmp_path, config_name=config).threads == 3
