"""The benchmark script's quick mode runs and reports every measure (its numbers are not checked:
speed is measured by the benchmark, never asserted by tests). The benchmark is ``benchmarks/``,
one file per section; ``scripts/benchmark.py`` is its entry point."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import main, startup
from pelab.pe import PE_REGISTRY
from pelab.tasks import TASK_REGISTRY


def quick_benchmark(tmp_path, repo_root, *options: str) -> dict:
    """``scripts/benchmark.py --quick <options>``'s JSON report (the script must succeed), with
    one torch thread: beside the suite's other worker, a second thread would make it wait on a
    busy core at every step (docs/performance.md, "Threads")."""
    out = tmp_path / "benchmark.json"
    proc = subprocess.run(
        [sys.executable, "scripts/benchmark.py", "--quick", "--json", str(out), *options],
        cwd=repo_root,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.processes
@pytest.mark.integration
def test_quick_benchmark_reports_every_measure(tmp_path, repo_root):
    """Every section but threads and operations, which their own tests run (threads times a
    busy machine too; tests/test_operations.py runs operations in process)."""
    sections = [name for name in main.SECTIONS if name not in ("threads", "operations")]
    report = quick_benchmark(tmp_path, repo_root, "--only", *sections)
    assert "threads" not in report
    assert set(report["results"]) == {"none", "rope"}
    assert all(r["ratio"] > 0 and r["windows"] > 0 for r in report["results"].values())
    assert report["results"]["rope"]["ratio_vs_xtransformers"] > 0  # the [bench] extra
    one_d = {name for name, cls in PE_REGISTRY.items() if cls.position_dims != 2}
    assert set(report["encodings"]) == one_d
    assert report["encodings"]["none"]["vs_none"] == 1.0
    assert report["encodings"]["learned"]["pe_params"] > 0
    assert report["encodings"]["shaw"]["attention"] == "eager"
    assert report["encodings"]["stick_breaking"]["attention"] == "eager"  # replaces the softmax
    assert report["encodings"]["fox"]["attention"] == "fused"  # asked of the built encoding
    labels = {
        " ".join([name, *(f"{k}={v}" for k, v in variant.items())])
        for name, cls in TASK_REGISTRY.items()
        for variant in ({}, *cls.variants)
    }
    assert {row.rsplit(" @ ", 1)[0] for row in report["data"]} == labels
    for label, row in report["data"].items():  # every task builds, from_dataset included
        assert row["generated_per_s"] > 0 and "skipped" not in row.get("note", ""), label
    members = report["members"]  # stacked members against sequential steps, and the bound
    assert set(members) == {"none", "rope"} and all(set(m) == {"1", "2"} for m in members.values())
    for by_k in members.values():
        for r in by_k.values():
            assert r["stacked_vs_sequential"] > 0 and r["bound_vs_sequential"] > 0
            assert r["stacked_encodings"] == 0  # parameter-free encodings run once, folded
    assert set(report["startup"]) == set(startup.QUICK)  # --quick: two commands, one run each
    assert all(0 < r["best_s"] <= r["median_s"] for r in report["startup"].values())
    [row] = report["validation"].values()  # --quick: rope; one validation, each way
    assert row["one_pass_s"] > 0 and row["greedy_s"] > 0 and row["steps_s"] > 0
    split = report["time_split"]  # one job's phases, its step against the matmul peak
    assert split["seconds"]["steps"] == 20 and split["seconds"]["validations"] == 2
    assert sum(split["shares"].values()) <= 1.0 and split["step_gflop"] > 0
    assert 0 < split["step_gflops_per_s"] < split["matmul_peak_gflops_per_s"]
    assert set(split["test_estimate_s"]) == {"1", "3"}  # one member and the stack (JSON keys)
    assert all(v["said"] > 0 and v["took"] > 0 for v in split["test_estimate_s"].values())


@pytest.mark.processes
@pytest.mark.integration
def test_the_encodings_section_can_time_a_few_beside_none(tmp_path, repo_root):
    report = quick_benchmark(
        tmp_path, repo_root, "--only", "encodings", "--encodings", "fox", "dape"
    )
    assert set(report["encodings"]) == {"none", "fox", "dape"}


@pytest.mark.processes
@pytest.mark.integration
def test_the_threads_section_times_one_and_two_threads_idle_and_busy(tmp_path, repo_root):
    report = quick_benchmark(tmp_path, repo_root, "--only", "threads")
    threads = report["threads"]
    [row] = threads["sizes"].values()  # --quick: the smallest size only
    assert row["params"] > 0
    counts = ["1", "2"] if threads["cores"] >= 2 else ["1"]
    for side in ("", "busy_"):
        assert list(row[f"{side}ms_per_step"]) == counts
        assert all(ms > 0 for ms in row[f"{side}ms_per_step"].values())
        assert row[f"{side}speedup_vs_1"]["1"] == 1.0


def test_every_section_is_a_file_of_its_own_that_the_entry_point_runs():
    folder = Path(main.__file__).parent
    files = {p.stem for p in folder.glob("*.py")} - {"__init__", "__main__", "main", "common"}
    files -= {"syncs"}  # the host-sync counter of the GPU check and tests/test_device.py
    # --ablation: a flag of its own; gpu_check: a command of its own (scripts/gpu_check.py)
    assert files == set(main.SECTIONS) | {"ablation", "gpu_check"}
    assert all(callable(module.section) for module in (*main.SECTIONS.values(), main.ablation))
    names = [module.__name__ for module in main.SECTIONS.values()]
    assert names == [f"benchmarks.{name}" for name in main.SECTIONS]
