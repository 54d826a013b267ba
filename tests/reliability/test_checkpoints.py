"""Checkpoints on disk: a corrupted one is refused with what to do, never loaded as wrong
weights (``torch.load`` does not check the zip CRCs)."""

from pathlib import Path

import pytest

from pelab.errors import ConfigError
from pelab.evaluate import load_weights
from pelab.reliability.checkpoints import read_checkpoint
from pelab.train import build_model, build_task, run
from tests.reliability.runs import config, results


def flip_one_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10  # inside the stored tensors, not the zip directory
    path.write_bytes(bytes(data))


def test_a_flipped_bit_in_a_checkpoint_is_refused_not_resumed_from(tmp_path):
    out = tmp_path / "run"
    cfg = config(tmp_path, out)
    run(cfg)
    last = out / "checkpoints" / "last.ckpt"
    read_checkpoint(last)  # intact: reads
    flip_one_bit(last)
    with pytest.raises(ConfigError, match=r"is corrupt: its member .* fails its CRC check"):
        read_checkpoint(last)
    with pytest.raises(ConfigError, match="fails its CRC check"):
        run(config(tmp_path, out, "skip_completed=false", "test=true"))  # resumes from it
    assert "fails its CRC check" in results(out)["error"]
    best = out / "checkpoints" / "best.ckpt"
    flip_one_bit(best)
    model = build_model(cfg, build_task(cfg))
    with pytest.raises(ConfigError, match="Delete it to resume from an older checkpoint"):
        load_weights(model, best)  # re-evaluation and pelab.load_run
