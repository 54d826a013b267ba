"""Seeds added where they decide (issue 44, item 2; issue 52, items 3-4): the plan brings both
cells of an undecided comparison to the planned look that would decide it, cheapest first within
the budget, costed from the records' own times, pays a shared cell once, records the look, and
writes jobs of the same protocol whose runs fall into the same cells; with --baseline and with
--reference too, never a table."""

import json
import shlex

import pytest

from pelab.analysis import add_seeds, baseline, report
from pelab.analysis.add_seeds import STACK_COST, best_targets, parse_budget, plan
from pelab.analysis.frames import lengths_frame, runs_frame
from pelab.analysis.sequential import LOOKS
from pelab.analysis.table import ablation
from pelab.errors import ConfigError
from tests.analysis.records import record

pytestmark = pytest.mark.usefixtures("tables_only")  # they read tables, notes and plans

# copy OOD (lengths 32 and 48 beyond training 1-16): alibi best; rope below and noisy
# (undecided, decidable by the last look); none far below (decided); sinusoidal 0.3 points
# below (no planned look decides it)
SCORES = {
    "alibi": [0.90, 0.84, 0.95],
    "rope": [0.80, 0.76, 0.84],
    "none": [0.10, 0.12, 0.11],
    "sinusoidal": [0.94, 0.85, 0.89],
}
WALL = {"alibi": 60.0, "rope": 30.0, "none": 20.0, "sinusoidal": 40.0}


def records() -> list[dict]:
    out = []
    for pe, scores in SCORES.items():
        for seed, value in enumerate(scores):
            rec = record(pe, "copy", seed, {8: 1.0, 32: value, 48: value}, chance=0.0)
            rec["wall_time_s"] = WALL[pe]
            out.append(rec)
    return out


def table(recs):
    return ablation(runs_frame(recs), lengths_frame(recs), "exact_match")


def test_a_budget_reads_as_people_write_it():
    assert [parse_budget(t) for t in ("30min", "2h", "90s", "45", "1.5h")] == [
        1800,
        7200,
        90,
        45,
        5400,
    ]
    with pytest.raises(ConfigError, match=r"--budget 2x: give a time such as 30min"):
        parse_budget("2x")


def test_the_plan_adds_seeds_to_the_undecided_cell_and_its_best_within_the_budget():
    result = table(records())
    column = result.by_task.query("split == 'OOD' and metric == 'exact_match'").set_index("pe")
    k = int(column.loc["rope", "seeds_to_decide"])
    assert k in LOOKS[1:] and column.loc["sinusoidal", "seeds_to_decide"] == float("inf")
    one = {pe: WALL[pe] / (1 + 2 * STACK_COST) for pe in WALL}  # a run's time, from its stack
    seconds = {pe: one[pe] * (1 + (k - 3 - 1) * STACK_COST) for pe in ("rope", "alibi")}
    targets = best_targets(result)
    assert [t.name for t in targets] == ["rope · copy vs alibi (OOD)"]
    additions = plan(result, targets, budget_s=seconds["rope"] + seconds["alibi"] + 1)
    assert {tuple(a.settings): a.seeds for a in additions} == {
        ("pe=rope", "task=copy"): list(range(3, k)),
        ("pe=alibi", "task=copy"): list(range(3, k)),
    }
    assert sum(a.seconds for a in additions) == pytest.approx(sum(seconds.values()))
    assert all(a.decides == ["rope · copy vs alibi (OOD)"] for a in additions)
    assert plan(result, targets, budget_s=seconds["rope"] + seconds["alibi"] - 1) == []


def test_the_jobs_keep_the_protocol_and_their_runs_join_the_same_cells(tmp_path, capsys):
    """The printed commands carry the runs' fixed settings and the cell's, the new seeds as one
    job's members, into the first source; records written there are read with the old ones."""
    source = tmp_path / "sweep"
    for i, rec in enumerate(records()):
        (source / f"job{i}").mkdir(parents=True)
        (source / f"job{i}" / "results.json").write_text(json.dumps(rec))
    assert report.main([str(source), "--add-seeds", "--budget", "2h"]) == 0
    printed = capsys.readouterr().out
    commands = [shlex.split(line) for line in printed.splitlines() if "scripts/train.py" in line]
    assert len(commands) == 2
    rope = next(c for c in commands if "pe=rope" in c)
    assert rope[1:4] == ["scripts/train.py", "-m", "model=decoder"]
    assert {"positions=contiguous", "trainer=default", "task=copy"} <= set(rope)
    seeds = next(c for c in rope if c.startswith("seeds="))
    new = [int(s) for s in seeds[len("seeds=[") : -1].split(",")]
    sweep_dir = next(c for c in rope if c.startswith("hydra.sweep.dir=")).split("=", 1)[1]
    assert sweep_dir.startswith(str(source / "added_seeds_"))
    added = tmp_path / "sweep" / "added_seeds_x" / "rope_copy"
    added.mkdir(parents=True)
    for seed in new:  # what the job would write: the same cell, new seeds
        rec = record("rope", "copy", seed, {8: 1.0, 32: 0.8, 48: 0.8}, chance=0.0)
        (added / f"s{seed}").mkdir()
        (added / f"s{seed}" / "results.json").write_text(json.dumps(rec))
    from pelab.analysis.collect import load_records

    again = table(load_records([str(source)], {}))
    cell = again.by_task.query("pe == 'rope' and split == 'OOD' and metric == 'exact_match'")
    assert int(cell["n"].iloc[0]) == 3 + len(new)


def test_run_runs_each_job_and_counts_the_failures(monkeypatch, tmp_path):
    ran = []

    class Done:
        def __init__(self, code):
            self.returncode = code

    monkeypatch.setattr(
        add_seeds.subprocess, "run", lambda cmd, cwd: ran.append(cmd) or Done(cmd[-1] == "bad")
    )
    assert add_seeds.run([["python", "ok"], ["python", "bad"]], tmp_path) == 1
    assert ran == [["python", "ok"], ["python", "bad"]]


def test_seeds_added_to_a_shipped_baseline_keep_only_their_portable_records(tmp_path):
    """As every shipped baseline: each results.json with no absolute path, nothing else."""
    sweep = tmp_path / "added_seeds_x"
    job = sweep / "rope_copy_s3-4_abc"
    for seed in (3, 4):
        run_dir = job / f"seed_{seed}"
        (run_dir / "checkpoints").mkdir(parents=True)
        (run_dir / "checkpoints" / "best.ckpt").write_bytes(b"weights")
        rec = record("rope", "copy", seed, {8: 1.0, 32: 0.5}, chance=0.0)
        rec |= {"checkpoint": str(run_dir / "checkpoints" / "best.ckpt")}
        rec["config"]["paths"] = {"output_dir": str(run_dir), "root_dir": "/elsewhere/repo"}
        (run_dir / "results.json").write_text(json.dumps(rec))
    (job / ".hydra").mkdir()
    (job / ".hydra" / "config.yaml").write_text("{}")
    (job / "train.log").write_text("log")
    assert add_seeds.ship(sweep) == 2
    files = sorted(p.relative_to(sweep).as_posix() for p in sweep.rglob("*") if p.is_file())
    assert files == [f"rope_copy_s3-4_abc/seed_{s}/results.json" for s in (3, 4)]
    kept = json.loads((job / "seed_3" / "results.json").read_text())
    assert kept["checkpoint"] == "rope_copy_s3-4_abc/seed_3/checkpoints/best.ckpt"
    assert not (job / ".hydra").exists()


def test_a_plan_records_the_look_beside_the_seeds_it_adds(tmp_path, capsys):
    """What was seen (each comparison's p and the look it asked for) and what was added, in the
    source's looks.json; the tables then list the look."""
    source = tmp_path / "sweep"
    for i, rec in enumerate(records()):
        (source / f"job{i}").mkdir(parents=True)
        (source / f"job{i}" / "results.json").write_text(json.dumps(rec))
    assert report.main([str(source), "--add-seeds", "--budget", "2h"]) == 0
    assert "the look is recorded in" in capsys.readouterr().out
    [look] = json.loads((source / "looks.json").read_text())
    assert look["design"]["looks"] == list(LOOKS) and look["metric"] == "exact_match"
    assert [s["comparison"] for s in look["seen"]] == ["rope · copy vs alibi (OOD)"]
    assert {tuple(a["settings"]) for a in look["added"]} == {
        ("pe=rope", "task=copy"),
        ("pe=alibi", "task=copy"),
    }
    assert not (source / "summary").exists()  # --add-seeds writes no table
    assert report.main([str(source), "--out", str(tmp_path / "out")]) == 0
    assert "Looks recorded" in (tmp_path / "out" / "table_tasks.md").read_text()


def mine_and_shipped(tmp_path, monkeypatch):
    """A baseline of rope and alibi (copy and reverse) and the user's sweep of ``mine``: mine
    above rope on copy out of distribution, undecided at 3 seeds."""
    from tests.analysis.test_baseline import write_sweep

    monkeypatch.setattr(baseline, "BASELINES", tmp_path / "baselines")
    baseline.save(write_sweep(tmp_path / "zoo", ["rope", "alibi"]), "ablation_cpu")
    mine = write_sweep(tmp_path / "mine", ["mine"])
    for path in mine.rglob("results.json"):
        rec = json.loads(path.read_text())
        seed = rec["choices"]["seed"]
        rec["metrics"]["test"]["32"]["token_acc"] = 0.3 + 0.04 * seed
        rec["metrics"]["test_ood"]["token_acc"] = 0.3 + 0.04 * seed
        rec["wall_time_s"] = 60.0
        path.write_text(json.dumps(rec))
    for path in (tmp_path / "baselines").rglob("results.json"):
        rec = json.loads(path.read_text())
        rec["wall_time_s"] = 60.0
        path.write_text(json.dumps(rec))
    return mine


def test_with_a_baseline_and_a_reference_it_plans_the_users_comparison_and_no_table(
    tmp_path, monkeypatch, capsys
):
    """``--baseline`` + ``--reference``: the family is the user's rows (mine vs rope), the jobs
    add mine's seeds into the user's sweep and rope's into the baseline, narrowed to --filter's
    task; no summary is written."""
    mine = mine_and_shipped(tmp_path, monkeypatch)
    argv = [str(mine), "--baseline", "ablation_cpu", "--reference", "pe=rope", "--metric"]
    argv += ["token_acc", "--add-seeds", "--budget", "10h", "--filter", "task=copy"]
    assert report.main(argv) == 0
    out = capsys.readouterr().out
    commands = [shlex.split(line) for line in out.splitlines() if "scripts/train.py" in line]
    where = {next(c for c in cmd if c.startswith("pe=")): cmd[-1] for cmd in commands}
    assert set(where) == {"pe=mine", "pe=rope"}, out
    assert where["pe=mine"].startswith(f"hydra.sweep.dir={mine}/added_seeds_")
    assert where["pe=rope"].startswith(f"hydra.sweep.dir={tmp_path}/baselines/ablation_cpu/")
    assert all("task=copy" in cmd for cmd in commands)
    assert "decides mine · yours · copy vs rope · ablation_cpu · copy (OOD)" in out
    assert not (mine / "summary").exists()
    assert (mine / "looks.json").is_file()
    assert (tmp_path / "baselines" / "ablation_cpu" / "looks.json").is_file()


def test_what_it_cannot_do_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    mine = mine_and_shipped(tmp_path, monkeypatch)
    base = [str(mine), "--baseline", "ablation_cpu", "--add-seeds"]
    assert report.main([*base, "--protocol", "max"]) == 2
    assert (
        "--add-seeds with --protocol max: it plans seeds for the mean" in capsys.readouterr().err
    )
    assert report.main([*base, "--compare", "pe=mine"]) == 2
    assert "--compare names a --reference's family" in capsys.readouterr().err
    assert report.main(["wandb:me/project", "--add-seeds"]) == 2
    assert "not to a W&B project" in capsys.readouterr().err


def test_a_second_call_into_a_summary_says_whose_it_replaces_and_leaves_nothing_stale(
    tmp_path, capsys
):
    source = tmp_path / "sweep"
    for i, rec in enumerate(records()):
        (source / f"job{i}").mkdir(parents=True)
        (source / f"job{i}" / "results.json").write_text(json.dumps(rec))
    assert report.main([str(source), "--reference", "pe=rope"]) == 0
    assert (source / "summary" / "table_vs_rope.md").is_file()
    capsys.readouterr()
    assert report.main([str(source), "--reference", "pe=none"]) == 0
    err = capsys.readouterr().err
    assert f"note: {source / 'summary'} held the summary of `make_table.py {source} " in err
    assert "--reference pe=rope`" in err and "give --out <dir> to keep both" in err
    assert not (source / "summary" / "table_vs_rope.md").exists()  # nothing stale beside it
    assert (source / "summary" / "table_vs_none.md").is_file()
    assert report.main([str(source), "--reference", "pe=none"]) == 0  # the same call: quiet
    assert "note:" not in capsys.readouterr().err


def test_beside_a_baseline_without_a_reference_only_the_users_rows_get_seeds(
    tmp_path, monkeypatch, capsys
):
    """The bold comparisons of your rows with each column's best; none of the baseline's rows
    among themselves (RoPE vs ALiBi), and no task you did not run."""
    mine = mine_and_shipped(tmp_path, monkeypatch)
    for path in (tmp_path / "baselines").rglob("results.json"):  # alibi best, rope undecided
        rec = json.loads(path.read_text())
        seed, pe = rec["choices"]["seed"], rec["choices"]["pe"]
        value = (0.45 if pe == "alibi" else 0.33) + 0.05 * seed
        rec["metrics"]["test"]["32"]["token_acc"] = rec["metrics"]["test_ood"]["token_acc"] = value
        path.write_text(json.dumps(rec))
    argv = [str(mine), "--baseline", "ablation_cpu", "--metric", "token_acc", "--add-seeds"]
    assert report.main([*argv, "--budget", "10h", "--filter", "task=copy"]) == 0
    out = capsys.readouterr().out
    decides = [line for line in out.splitlines() if "decides" in line]
    assert decides and all("mine · yours" in line for line in decides), out
