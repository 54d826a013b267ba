"""Bad input is refused before any training, with a ``ConfigError`` naming the bad value and
what would be valid; a single run refused writes no ``results.json`` and trains nothing (a
sweep's job records the refusal, so the sweep's summary says why)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from hydra.errors import MissingConfigException

from pelab.errors import ConfigError
from pelab.record import RESULTS
from pelab.reliability.checks.validate import check_added_keys, check_types, missing_keys
from pelab.train import train
from tests.conftest import TINY, compose_config
from tests.reliability.runs import results
from tests.test_configs import options

pytestmark = pytest.mark.faults  # the fault campaign: make test-faults


def assert_refused_before_training(cfg, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        train(cfg)
    assert not Path(cfg.paths.output_dir, RESULTS).exists()  # no record: nothing ran
    assert not Path(cfg.paths.output_dir, "checkpoints").exists()  # nothing was trained


def test_a_refused_run_never_says_results_were_written(tiny_cfg, caplog):
    with caplog.at_level("INFO", logger="pelab.record"):
        assert_refused_before_training(tiny_cfg("task.eval_lengths=[16,32]"), "in-distribution")
    assert "results written" not in caplog.text


def test_a_sweeps_job_records_its_refusal(tiny_cfg, monkeypatch):
    monkeypatch.setattr("pelab.hydra_job.in_sweep", lambda: True)
    cfg = tiny_cfg("task.eval_lengths=[16,32]")
    with pytest.raises(ConfigError, match="has no in-distribution length"):
        train(cfg)
    record = results(Path(cfg.paths.output_dir))
    assert record["status"] == "failed" and record["error"].startswith("ConfigError")


def test_an_unknown_group_option_lists_the_valid_ones(tmp_path):
    with pytest.raises(MissingConfigException, match=r"(?s)pe/rotary.*Available options.*rope"):
        compose_config([*TINY, "pe=rotary"], tmp_path)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # options a component does not have, values of the wrong type
        (["+pe.bsae=10"], r"pe.bsae is not an option of RotaryPE; valid options: .*base"),
        # keys added where pelab reads no such key (every key it reads has a default)
        (
            ["+model.optimzer.lr=1"],
            r"model.optimzer is not a key of model; did you mean optimizer\?; valid keys: .*net",
        ),
        (["+data.batchsize=3"], r"data.batchsize is not a key of data; did you mean batch_size"),
        (["+sead=3"], r"sead is not a key of the config; did you mean seed\?"),
        (["model.net.d_model=abc"], r"model.net.d_model='abc' has the wrong type: .* int"),
        (["pe.base=fast"], r"pe.base='fast' has the wrong type: RotaryPE expects float"),
        # a choice its Literal type does not list, named with the choices
        (["pe.layout=spiral"], r"pe.layout='spiral' is not a choice; .*: interleaved, half$"),
        (["task=grid", "task.mode=rotate"], "task.mode='rotate' is not a choice; .*: transpose"),
        (["model.net.attn_impl=fast"], "model.net.attn_impl='fast' is not a choice; .*: auto, "),
        (["+model.net.causal=true"], "model.net.causal is not an option of Transformer; .*d_ff"),
        (["task.train_lengths=[1,x]"], r"task.train_lengths=\[1, 'x'\] has the wrong type"),
        (["trainer.max_steps=ten"], r"trainer.max_steps='ten' has the wrong type"),
        (["seed=abc"], r"seed='abc' has the wrong type: expected int"),
        (["data.batch_size=0"], r"data.batch_size=0 is out of range: it must be >= 1"),
        # ranges the components' annotations do not state (a torch or Lightning error otherwise)
        (["model.optimizer.lr=fast"], r"model.optimizer.lr='fast' has the wrong type"),
        (["task=from_dataset"], r"task.path: required, with no default; .*\(task.path=<value>\)"),
        (["model.optimizer.lr=-1"], r"model.optimizer.lr=-1 is out of range: it must be > 0"),
        (["trainer.val_check_interval=0"], r"val_check_interval=0 is out of range: .* >= 1"),
        (["model.net.dropout=1.5"], r"model.net.dropout=1.5 is out of range: .* in \[0, 1\)"),
        (["model.net.d_ff=0"], r"model.net.d_ff=0 is out of range: it must be >= 1"),
        (["model.schedule.min_lr_ratio=-1"], r"min_lr_ratio=-1 is out of range: .* in \[0, 1\]"),
        (["model.kind=seq2seq"], "valid choices: decoder, encoder"),
        (["trainer.max_steps=-1"], r"trainer.max_steps must be >= 1, got -1"),
        # impossible shapes
        (["model.net.d_model=18", "model.net.n_heads=4"], "18 is not divisible by .*n_heads=4"),
        (
            ["pe=sinusoidal", "model.net.d_model=15", "model.net.n_heads=1"],
            "even model.net.d_model, got 15",
        ),
        (["pe=rope", "model.net.d_model=18", "model.net.n_heads=2"], "head_dim=9"),
        # lengths beyond what an encoding supports
        (["pe=learned", "pe.max_len=20"], r"cannot\s+extrapolate.*raise pe.max_len to at least"),
        (
            ["positions=randomized", "positions.max_position=32"],
            r"positions.max_position=32 is shorter than the longest sequence",
        ),
        # training and evaluation lengths
        (["task.train_lengths=[8,2]"], r"train_lengths must be \[min, max\].*got \[8, 2\]"),
        (["task.train_lengths=[]"], r"train_lengths must be \[min, max\].*got \[\]"),
        (["task.train_lengths=[0,4]"], r"train_lengths must be \[min, max\] with 1 <= min"),
        (["task.eval_lengths=[0,8]"], r"eval_lengths must be a non-empty list of lengths >= 1"),
        (
            ["data.length_sampling=lengths"],
            r"data.length_sampling='lengths' is not a choice; valid choices: uniform, tokens",
        ),
        # evaluation that cannot fit in memory, measured ahead or extrapolated from shorter
        # lengths (too long to measure: an eager bias at 100000 tokens)
        (
            ["pe=t5_bias", "task.eval_lengths=[8,100000]"],
            r"length 100000 .* \(extrapolated from shorter lengths\).*not even one sequence",
        ),
        (
            ["pe=none", "task.eval_lengths=[8,100000]", "data.eval_batch_size=4096"],
            r"evaluating length 100000 .* needs at least .* GiB.* lower data.eval_batch_size",
        ),
    ],
)
def test_bad_settings_are_refused_before_training(tiny_cfg, overrides, message):
    assert_refused_before_training(tiny_cfg(*overrides), message)


def test_the_keys_left_missing_are_omegaconfs_without_resolving(tiny_cfg):
    """``missing_keys`` names what ``OmegaConf.missing_keys`` names, in dicts, lists and behind
    an interpolation, from the unresolved container."""
    from omegaconf import OmegaConf

    made = {"a": "???", "b": {"c": "???", "d": [1, "???", {"e": "???"}]}, "f": "${g}", "g": 2}
    for cfg in (OmegaConf.create(made), tiny_cfg("task=from_dataset"), tiny_cfg()):
        unresolved = OmegaConf.to_container(cfg, resolve=False)
        assert sorted(missing_keys(unresolved)) == sorted(OmegaConf.missing_keys(cfg))
    assert sorted(missing_keys(made)) == ["a", "b.c", "b.d[1]", "b.d[2].e"]


def test_keys_added_under_a_target_or_in_an_open_section_are_left_to_their_checks(tiny_cfg):
    cfg = tiny_cfg("++task.n_val=8", "+callbacks.extra._target_=lightning.Callback")
    check_added_keys(cfg, ["++task.n_val=8", "+callbacks.extra._target_=lightning.Callback"])
    check_added_keys(cfg, ["+experiment=ablation_cpu"])  # a config group: no key of its name


@pytest.fixture(scope="module")
def trained_checkpoint(tmp_path_factory) -> Path:
    """A checkpoint of the tiny rope decoder with d_model 16."""
    tmp = tmp_path_factory.mktemp("trained")
    cfg = compose_config([*TINY, "logger=csv", "test=false"], tmp)
    train(cfg)
    return Path(cfg.paths.output_dir) / "checkpoints" / "last.ckpt"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["model.net.d_model=32"],
            r"other settings.*\n  model.net.d_model: checkpoint 16 != this",
        ),
        (["pe=alibi"], r"other settings(.|\n)*pe._target_: checkpoint 'pelab.pe.rotary.RotaryPE'"),
        (["seed=3"], r"seed: checkpoint 0 != this run 3"),
    ],
)
@pytest.mark.integration
def test_a_checkpoint_from_another_config_is_refused_naming_what_differs(
    tiny_cfg, trained_checkpoint, overrides, message
):
    cfg = tiny_cfg(f"ckpt_path={trained_checkpoint}", *overrides)
    assert_refused_before_training(cfg, message)


def test_foreign_weights_of_another_shape_are_refused(tiny_cfg, tmp_path):
    foreign = tmp_path / "foreign.ckpt"
    torch.save({"state_dict": {"net.tok_emb.weight": torch.zeros(3, 3)}}, foreign)
    message = r"do not fit the model(.|\n)*net.tok_emb.weight: checkpoint \(3, 3\) != model"
    assert_refused_before_training(tiny_cfg(f"ckpt_path={foreign}"), message)


@pytest.mark.integration
def test_a_corrupt_or_truncated_checkpoint_is_refused(tiny_cfg, trained_checkpoint, tmp_path):
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(trained_checkpoint.read_bytes()[:1000])
    assert_refused_before_training(tiny_cfg(f"ckpt_path={truncated}"), "not a readable checkpoint")
    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(b"\x00not a checkpoint" * 100)
    assert_refused_before_training(tiny_cfg(f"ckpt_path={garbage}"), "not a readable checkpoint")
    missing = tmp_path / "missing.ckpt"
    assert_refused_before_training(tiny_cfg(f"ckpt_path={missing}"), "does not exist")


class RunsCode:
    """A pickle that, loaded without ``weights_only``, would run a shell command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_checkpoint_that_would_run_code_is_refused_and_never_executed(tiny_cfg, tmp_path):
    marker = tmp_path / "code-ran"
    evil = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "payload": RunsCode(marker)}, evil)
    assert_refused_before_training(
        tiny_cfg(f"ckpt_path={evil}"), "only a full unpickle could load, which pelab refuses"
    )
    assert not marker.exists()


def test_every_shipped_option_passes_the_type_check():
    """No false alarms: every option file of every group, as shipped, is accepted."""
    for group in ("model", "pe", "task", "positions", "trainer", "logger", "experiment", "debug"):
        for option in options(group):
            required = ["task.path=data.csv"] if option == "from_dataset" else []  # its ???
            check_types(compose_config([f"{group}={option}", *required]))
