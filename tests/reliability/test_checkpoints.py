"""Checkpoints on disk: a corrupted one is refused with what to do, never loaded as wrong
weights (``torch.load`` does not check the zip CRCs)."""

import multiprocessing
import time
import warnings
from pathlib import Path

import pytest
import torch

from pelab.assembly import build_model, build_task
from pelab.errors import ConfigError
from pelab.reliability.resume.callbacks import BestCheckpoints
from pelab.reliability.resume.checkpoints import AtomicCheckpointIO, differences, read_checkpoint
from pelab.reliability.resume.start import resuming_in_place
from pelab.train import train
from pelab.trained import load_weights
from tests.reliability.runs import checkpoint, config, fault, killed_in_the_test, results

pytestmark = pytest.mark.faults  # the fault campaign: make test-faults


def _save_big_checkpoints(path: str) -> None:
    """In a child process: save ~400 MB checkpoints to ``path`` forever (until killed)."""
    io = AtomicCheckpointIO()
    while True:
        io.save_checkpoint({"global_step": 2, "w": torch.randn(100_000_000)}, path)


@pytest.mark.processes
@pytest.mark.integration
def test_a_kill_during_a_checkpoint_save_leaves_the_previous_one_and_its_litter_is_removed(
    tmp_path,
):
    path = tmp_path / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint({"global_step": 1, "w": torch.ones(3)}, path)
    child = multiprocessing.get_context("spawn").Process(
        target=_save_big_checkpoints, args=(str(path),)
    )
    child.start()
    tmp = tmp_path / f".last.ckpt.{child.pid}.tmp"
    deadline = time.monotonic() + 120
    while not (tmp.exists() and tmp.stat().st_size > 1_000_000):  # mid-write
        assert time.monotonic() < deadline and child.is_alive()
        time.sleep(0.01)
    child.kill()
    child.join()
    assert checkpoint(path)["global_step"] == 1  # the previous checkpoint, complete
    assert tmp.exists()  # the killed save's partial file, which nothing reads
    AtomicCheckpointIO().save_checkpoint({"global_step": 3, "w": torch.ones(3)}, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]
    assert checkpoint(path)["global_step"] == 3


def flip_one_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10  # inside the stored tensors, not the zip directory
    path.write_bytes(bytes(data))


@pytest.mark.integration
def test_a_flipped_bit_in_a_checkpoint_is_refused_not_resumed_from(tmp_path):
    out = tmp_path / "run"
    cfg = config(tmp_path, out)
    train(cfg)
    killed_in_the_test(out)  # not completed: a re-run resumes from last.ckpt
    earlier = results(out)
    last = out / "checkpoints" / "last.ckpt"
    read_checkpoint(last)  # intact: reads
    flip_one_bit(last)
    with pytest.raises(ConfigError, match=r"is corrupt: its member .* fails its CRC check"):
        read_checkpoint(last)
    with pytest.raises(ConfigError, match="fails its CRC check"):
        train(config(tmp_path, out, "skip_completed=false", "test=true"))  # resumes from it
    assert results(out) == earlier  # refused before any work: the earlier record stands
    best = out / "checkpoints" / "best.ckpt"
    flip_one_bit(best)
    model = build_model(cfg, build_task(cfg))
    with pytest.raises(ConfigError, match="Delete it to resume from an older checkpoint"):
        load_weights(model, best)  # re-evaluation and pelab.load_run


def test_only_the_directory_a_run_resumes_from_is_not_warned_about_being_full(tmp_path):
    """Lightning's "exists and is not empty" (``ModelCheckpoint.setup``), left out for the
    directory of the checkpoint a run resumes from, and only there."""
    own, other = tmp_path / "run" / "checkpoints", tmp_path / "other" / "checkpoints"
    full = "Checkpoint directory {} exists and is not empty."
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with resuming_in_place(own / "last.ckpt"):
            warnings.warn(full.format(own), stacklevel=1)
            warnings.warn(full.format(other), stacklevel=1)
        with resuming_in_place(None):  # from scratch
            warnings.warn(full.format(own), stacklevel=1)
    assert [str(w.message) for w in said] == [full.format(other), full.format(own)]


def test_the_best_checkpoints_come_along_when_a_run_resumes_in_another_directory(tmp_path):
    """``BestCheckpoints`` keeps each member's best score and copies its file into the new
    directory, so the next validation does not become "best" whatever its score."""
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    (old / "best.ckpt").write_bytes(b"weights of step 50")
    saved = BestCheckpoints([old / "best.ckpt"], [{}])
    saved.best = [0.75]
    moved = BestCheckpoints([new / "best.ckpt"], [{}])
    moved.load_state_dict(saved.state_dict())
    assert moved.best == [0.75] and moved.paths == [new / "best.ckpt"]
    assert (new / "best.ckpt").read_bytes() == b"weights of step 50"


@pytest.mark.integration
def test_a_killed_run_resumed_into_a_new_directory_ends_as_the_uninterrupted_one(tmp_path):
    [whole] = train(config(tmp_path, tmp_path / "whole"))
    killed = tmp_path / "killed"
    with pytest.raises(RuntimeError, match="injected fault"):
        train(config(tmp_path, killed, *fault("raise", 6)))
    elsewhere = tmp_path / "elsewhere"
    [resumed] = train(
        config(tmp_path, elsewhere, f"ckpt_path={killed / 'checkpoints' / 'last.ckpt'}")
    )
    assert resumed["metrics"] == whole["metrics"]
    best = [
        checkpoint(d / "checkpoints" / "best.ckpt")["global_step"]
        for d in (tmp_path / "whole", elsewhere)
    ]
    assert best[0] == best[1]


def test_an_option_the_checkpoint_predates_is_no_difference_at_its_default():
    rope = "pelab.pe.rotary.RotaryPE"
    saved = {"pe": {"_target_": rope, "base": 10000.0}}  # saved before keep_frequencies existed
    at_default = {"pe": {"_target_": rope, "base": 10000.0, "keep_frequencies": 1.0}}
    assert differences(saved, at_default) == []
    changed = {"pe": {"_target_": rope, "base": 10000.0, "keep_frequencies": 0.5}}
    assert differences(saved, changed) == ["pe.keep_frequencies: checkpoint None != this run 0.5"]
    renamed = {"pe": {"_target_": rope, "base": 10000.0, "no_such_option": 1.0}}
    assert differences(saved, renamed) == ["pe.no_such_option: checkpoint None != this run 1.0"]
    assert differences(at_default, saved) == [  # an option the run no longer has is a change
        "pe.keep_frequencies: checkpoint 1.0 != this run None"
    ]


def test_a_setting_of_every_encoding_or_model_the_checkpoint_predates_is_no_difference():
    """``pe.layers`` and its temperature are no constructor option (``predates`` cannot read
    them off a signature): ``config_files.added_defaults`` gives their defaults."""
    rope, net = "pelab.pe.rotary.RotaryPE", "pelab.models.transformer.Transformer"
    saved = {"pe": {"_target_": rope}, "model": {"net": {"_target_": net}}}
    added = {"layers": None, "nope_temperature": 0.0, "nope_temperature_length": 8192}
    now = {"pe": {"_target_": rope, **added}, "model": {"net": {"_target_": net}}}
    now["model"]["net"]["attn_scale"] = "none"
    assert differences(saved, now) == []
    now["pe"]["nope_temperature"], now["model"]["net"]["attn_scale"] = 0.1, "ssmax"
    assert differences(saved, now) == [
        "model.net.attn_scale: checkpoint None != this run 'ssmax'",
        "pe.nope_temperature: checkpoint None != this run 0.1",
    ]
    # a network's options are its NetDims' fields (``configured_by``), not its constructor's
    bare = {"model": {"net": {"_target_": net}}}
    assert differences(bare, {"model": {"net": {"_target_": net, "dropout": 0.0}}}) == []
    assert differences(bare, {"model": {"net": {"_target_": net, "dropout": 0.1}}}) == [
        "model.net.dropout: checkpoint None != this run 0.1"
    ]


def test_a_checkpoint_of_the_engine_before_stacks_gets_a_one_line_refusal(tmp_path):
    """Weights saved before every run became a stack (``[out, in]`` where the model now has
    ``[K, out, in]``) cannot resume; the refusal says what to do instead of listing shapes."""
    from pelab.reliability.resume.checkpoints import ENGINE_KEY, check_compatible

    cfg = config(tmp_path, tmp_path / "run")
    model = build_model(cfg, build_task(cfg))
    old = {"state_dict": {k: v.squeeze(0) for k, v in model.state_dict().items()}}
    with pytest.raises(ConfigError, match="cannot resume this run: set resume=false") as error:
        check_compatible(old, cfg, model, tmp_path / "last.ckpt")
    assert "\n" not in str(error.value)
    check_compatible({**old, ENGINE_KEY: 2, "state_dict": model.state_dict()}, cfg, model, "x")
