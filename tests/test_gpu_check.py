"""``scripts/gpu_check.py --device cpu --quick`` runs each kind of row of the GPU check on a
CPU, so the script a GPU session runs cannot rot (its speeds are not checked: a benchmark
measures speed)."""

import json

import pytest

from benchmarks.gpu_check import main


@pytest.mark.integration
def test_the_gpu_check_runs_every_row_on_a_cpu(tmp_path, capsys):
    rows = main(["--device", "cpu", "--quick", "--json", str(tmp_path / "rows.json")])
    names = [r.name for r in rows]
    assert names == ["default", "members 1", "members 2", "preset chomsky_gpu", "syncs", "jobs 2"]
    assert rows[0].result in ("not learned",) or rows[0].result.startswith("learned at step")
    assert all(r.result == "completed" for r in rows[1:5])
    assert rows[5].result == "6 of 6 members completed"
    members = {r.name: r for r in rows}
    assert members["members 2"].member_steps_per_s == pytest.approx(
        2 * members["members 2"].steps_per_s
    )
    assert members["syncs"].syncs.startswith("0 quiet")  # no host sync but to log
    printed = capsys.readouterr().out
    assert printed.startswith("pelab gpu_check on the CPU") and all(n in printed for n in names)
    assert [r["name"] for r in json.loads((tmp_path / "rows.json").read_text())] == names
