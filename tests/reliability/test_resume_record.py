"""What the record of a resumed run says: the total wall time and each attempt's."""

from __future__ import annotations

import pytest

from pelab.train import run
from tests.reliability.runs import config, fault, results


def test_a_resumed_run_records_its_total_wall_time_and_each_attempt(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="injected fault at step 6"):
        run(config(tmp_path, out, *fault("raise", 6)))
    first = results(out)["wall_time_s"]
    record = run(config(tmp_path, out))  # the same command again: resumes from last.ckpt
    assert record["resumed_from"].endswith("last.ckpt")
    parts = record["wall_time_parts_s"]
    assert len(parts) == 2 and parts[0] == first
    assert record["wall_time_s"] == pytest.approx(sum(parts), abs=0.02)
    assert results(out)["wall_time_parts_s"] == parts
