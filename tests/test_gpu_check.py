"""``scripts/gpu_check.py --device cpu --quick`` runs each kind of row of the GPU check on a
CPU, so the script a GPU session runs cannot rot (its speeds are not checked: a benchmark
measures speed)."""

import json

import pytest

from benchmarks.gpu_check import Row, judge, main


@pytest.mark.integration
def test_the_gpu_check_runs_every_row_on_a_cpu(tmp_path, capsys):
    check = main(["--device", "cpu", "--quick", "--json", str(tmp_path / "rows.json")])
    rows = check.rows
    names = [r.name for r in rows]
    assert names == ["default", "members 1", "members 2", "preset chomsky_gpu", "syncs", "jobs 2"]
    assert rows[0].result in ("not learned",) or rows[0].result.startswith("learned at step")
    assert all(r.result == "completed" for r in rows[1:5])
    assert rows[5].result == "6 of 6 members completed"
    # over the jobs' training time, not the sweep's wall (which counts each process's start-up)
    assert rows[5].member_steps_per_s > 6 * rows[5].steps / rows[5].wall_s
    members = {r.name: r for r in rows}
    assert members["members 2"].member_steps_per_s == pytest.approx(
        2 * members["members 2"].steps_per_s
    )
    assert members["syncs"].syncs.startswith("0 quiet")  # no host sync but to log
    printed = capsys.readouterr().out
    assert printed.startswith("pelab gpu_check on the CPU") and all(n in printed for n in names)
    assert check.ok and printed.rstrip().endswith("targets: not judged at --quick toy size")
    assert [r["name"] for r in json.loads((tmp_path / "rows.json").read_text())] == names


def test_the_gpu_check_judges_each_target_and_names_a_failed_row():
    """A miss or a failed row makes the check fail (``cli`` exits 1), each target printed
    beside its figure; a row that raised is named with why."""
    rows = [
        Row("members 1", steps_per_s=10.0),
        Row("members 20", steps_per_s=6.0),  # 1.67x the wall: met
        Row("members 1 t5_bias", steps_per_s=10.0),
        Row("members 20 t5_bias", steps_per_s=4.0),  # 2.5x the wall: missed
        Row("members 1 path", result="FAILED: RuntimeError: CUDA error"),
        Row("jobs 1", member_steps_per_s=100.0),
        Row("jobs 8", member_steps_per_s=450.0),
    ]
    said, ok = judge(rows, quick=False)
    assert not ok
    assert said[0] == "FAILED rows: members 1 path"
    assert "met   rope: K = 20 at most 2x the wall of K = 1: 0.60x (target >= 0.5x)" in said
    assert "MISS  t5_bias: K = 20 at most 2x the wall of K = 1: 0.40x (target >= 0.5x)" in said
    assert any(s.startswith("MISS  path: K = 20") and "not measured" in s for s in said)
    assert "met   8 jobs at least 4x one job's member-steps/s: 4.50x (target >= 4.0x)" in said
    rows[3].steps_per_s, rows[4] = 6.0, Row("members 1 path", steps_per_s=5.0)
    rows.append(Row("members 20 path", steps_per_s=3.0))
    assert judge(rows, quick=False)[1]
    assert judge([Row("x", result="FAILED: E: why")], quick=True) == (
        ["FAILED rows: x", "targets: not judged at --quick toy size"],
        False,
    )
