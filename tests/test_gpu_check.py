"""``scripts/gpu_check.py --device cpu --quick`` runs each kind of row of the GPU check on a
CPU, so the script a GPU session runs cannot rot (its speeds are not checked: a benchmark
measures speed)."""

import json

import pytest

from benchmarks.gpu_check import Row, grid_encodings, judge, main


@pytest.mark.processes
@pytest.mark.integration
def test_the_gpu_check_runs_every_row_on_a_cpu(tmp_path, capsys):
    check = main(["--device", "cpu", "--quick", "--json", str(tmp_path / "rows.json")])
    rows = check.rows
    names = [r.name for r in rows]
    assert names == [
        "default", "members 1", "members 2", "preset chomsky_gpu", "syncs", "jobs 2",
        "rate rope", "rate t5_bias",
    ]  # fmt: skip
    assert rows[0].result in ("not learned",) or rows[0].result.startswith("learned at step")
    assert all(r.result == "completed" for r in rows[1:5])
    assert rows[5].result == "6 of 6 members completed"
    # each run's recorded kernel: rope's in bf16 under autocast, the bias kept float32
    assert [r.kernel for r in rows[6:]] == ["flash (cpu), bfloat16", "flash (cpu), float32"]
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
        Row("node 4 gpus", member_steps_per_s=300.0),  # 3.0x on 4 GPUs: missed (3.2x)
        # 3 tasks x 20,000 steps at 25 and 50 steps/s: 0.67 + 0.33 = 1.0 h; /4.5 with 8 jobs
        Row("rate rope", steps_per_s=25.0),
        Row("rate t5_bias", steps_per_s=50.0),
    ]
    said, ok = judge(rows, quick=False)
    assert not ok
    assert said[0] == "FAILED rows: members 1 path"
    assert "met   rope: K = 20 at most 2x the wall of K = 1: 0.60x (target >= 0.5x)" in said
    assert "MISS  t5_bias: K = 20 at most 2x the wall of K = 1: 0.40x (target >= 0.5x)" in said
    assert any(s.startswith("MISS  path: K = 20") and "not measured" in s for s in said)
    assert "met   8 jobs at least 4x one job's member-steps/s: 4.50x (target >= 4.0x)" in said
    assert "MISS  4 GPUs, one job each, at least 0.8 x 4 one job's member-steps/s: 3.00x" in said
    assert said[-1].startswith(
        "met   the ablation_gpu grid at most 8 GPU-hours on one GPU: 1.0 one job at a time "
        "(2 encodings' rates), 0.2 with 8 jobs sharing it (4.50x)"
    )
    rows[7].member_steps_per_s = 330.0
    rows[3].steps_per_s, rows[4] = 6.0, Row("members 1 path", steps_per_s=5.0)
    rows.append(Row("members 20 path", steps_per_s=3.0))
    assert judge(rows, quick=False)[1]
    assert judge([Row("x", result="FAILED: E: why")], quick=True) == (
        ["FAILED rows: x", "targets: not judged at --quick toy size"],
        False,
    )


def test_the_grid_encodings_are_the_ablation_gpu_sweeps():
    """The rate rows cover the grid as ``-m`` expands it: the 1-D encodings but abacus."""
    from pelab.pe import PE_REGISTRY

    names = grid_encodings()
    assert names == sorted(n for n in PE_REGISTRY if not n.endswith("_2d") and n != "abacus")
    assert "rope" in names and "path" in names
