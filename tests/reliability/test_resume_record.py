"""What the record of a resumed run says: the total wall time and each attempt's."""

from __future__ import annotations

import pytest
from lightning.pytorch.callbacks import Callback

from pelab import trainer
from pelab.train import train
from tests.reliability.runs import config, fault, results


@pytest.mark.integration
def test_a_resumed_run_records_its_total_wall_time_and_each_attempt(tmp_path, caplog):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="injected fault at step 6"):
        train(config(tmp_path, out, *fault("raise", 6)))
    first = results(out)["wall_time_s"]
    with caplog.at_level("INFO", logger="pelab.reliability.resume.start"):
        [record] = train(config(tmp_path, out))  # the same command again: resumes from last.ckpt
    assert record["resumed_from"].endswith("last.ckpt")
    assert record["resumed_from_step"] == 4  # the last validation before the fault
    assert f"resuming from step 4 (checkpoint {record['resumed_from']})" in caplog.text
    parts = record["wall_time_parts_s"]
    assert len(parts) == 2 and parts[0] == first
    assert record["wall_time_s"] == pytest.approx(sum(parts), abs=0.02)
    assert results(out)["wall_time_parts_s"] == parts


SEEN: list[tuple[int | None, int]] = []  # (total, n) of the training bar after each step


class BarSpy(Callback):
    def on_train_batch_end(self, trainer, *args):
        bar = trainer.progress_bar_callback.train_progress_bar
        SEEN.append((bar.total, bar.n))


@pytest.mark.integration
def test_a_resumed_runs_progress_bar_has_its_total_and_starts_where_it_resumed(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(trainer, "interactive", lambda: True)  # a terminal: bars are on
    bar = ["trainer.enable_progress_bar=true", "callbacks.progress_bar=null"]
    bar += ["+callbacks.bar._target_=pelab.utils.progress.StepProgressBar"]
    bar += [f"+callbacks.spy._target_={__name__}.BarSpy"]
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="injected fault at step 6"):
        train(config(tmp_path, out, *fault("raise", 6), *bar))
    SEEN.clear()
    train(config(tmp_path, out, *bar))
    assert SEEN[0] == (8, 5)  # resumed from the checkpoint at step 4: its 5th step of 8
