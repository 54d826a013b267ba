"""Loading runs: every job of a sweep is a row, whatever became of it."""

import json
import math
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from pelab.analysis.collect import directory_records, load_records, matches
from pelab.analysis.frames import NOT_SET, lengths_frame, runs_frame
from pelab.analysis.sweep_grid import sweep_jobs
from pelab.analysis.wandb_records import wandb_record
from pelab.errors import ConfigError
from tests.analysis.records import CHOICES, record, write_job, write_multirun


def test_the_grid_expands_like_hydras_basic_sweeper_and_the_command_line_wins():
    multirun = OmegaConf.create(
        {
            "hydra": {
                "sweeper": {"params": {"pe": "none,rope", "seed": "0,1,2"}},
                "overrides": {"task": ["seed=5", "task=sort"]},
            }
        }
    )
    assert sweep_jobs(multirun) == [
        ["pe=none", "seed=5", "task=sort"],
        ["pe=rope", "seed=5", "task=sort"],
    ]


def test_completed_failed_crashed_and_missing_jobs_are_all_found(tmp_path):
    sweep = tmp_path / "sweep"
    write_multirun(sweep, {}, ["pe=none,alibi", "seed=0,1"])
    done = record("none", "copy", 0, {8: 1.0, 16: 0.5, 32: 0.0})
    failed = record("none", "copy", 1, status="failed")
    choices = {"pe": "none", "task": "copy", **CHOICES}
    write_job(sweep / "0_none_copy_s0", done, choices, 0, ["pe=none", "seed=0"])
    write_job(sweep / "1_none_copy_s1", failed, choices, 1, ["pe=none", "seed=1"])
    crashed = {**choices, "pe": "alibi"}
    write_job(sweep / "2_alibi_copy_s0", None, crashed, 0, ["pe=alibi", "seed=0"])
    # job 3 (alibi, seed 1) never started; a re-evaluation and another script's log are no runs
    evaluation = {**done, "checkpoint": "best.ckpt"}
    (sweep / "0_none_copy_s0" / "eval" / "x").mkdir(parents=True)
    (sweep / "0_none_copy_s0" / "eval" / "x" / "results.json").write_text(json.dumps(evaluation))
    write_job(tmp_path / "eval_log", None, choices, 0, [], config_name="eval")

    records = directory_records(tmp_path)
    found = {(r["choices"]["pe"], r["choices"]["seed"]): r for r in records}
    assert len(records) == 4
    assert {k: r["status"] for k, r in found.items()} == {
        ("none", 0): "completed",
        ("none", 1): "failed",
        ("alibi", 0): "crashed",
        ("alibi", 1): "missing",
    }
    assert found[("none", 0)]["overrides"] == ["pe=none", "seed=0"]
    assert "killed" in found[("alibi", 0)]["error"]
    assert found[("alibi", 1)]["choices"]["task"] == "copy"  # the sweep's default choice


def test_runs_frame_has_a_column_per_changed_setting_and_nan_without_results():
    runs = runs_frame(
        [
            record("rope", "copy", 0, {8: 1.0, 32: 0.25}, overrides=["model.net.d_model=32"]),
            record("rope", "copy", 1, status="failed", overrides=[]),
        ]
    )
    assert list(runs["model.net.d_model"]) == ["32", NOT_SET]
    assert runs.loc[0, "id/exact_match"] == 1.0 and runs.loc[0, "ood/exact_match"] == 0.25
    assert math.isnan(runs.loc[1, "id/exact_match"])
    assert runs.loc[1, "error"].startswith("ConfigError")
    assert runs.loc[0, "experiment"] == NOT_SET and list(runs["seed"]) == [0, 1]


def test_lengths_frame_lists_measured_and_configured_lengths_with_chance():
    lengths = lengths_frame(
        [
            record("rope", "copy", 0, {8: 1.0, 32: 0.5}, chance=0.03),
            record("a", "copy", 1, None, "failed"),
        ]
    )
    assert list(lengths["run"]) == [0, 0, 1, 1, 1]
    assert list(lengths["length"]) == [8, 32, 8, 16, 32]
    assert list(lengths["exact_match"][:2]) == [1.0, 0.5]
    assert lengths["exact_match"][2:].isna().all()
    assert list(lengths["chance/token_acc"][:2]) == [0.03, 0.03]


def test_a_wandb_run_becomes_the_record_its_results_json_would_hold():
    metrics = {
        "test": {"8": {"exact_match": 0.5, "token_acc": 0.75}},
        "test_id": {"exact_match": 0.5},
    }
    summary = {
        "test/exact_match/len_8": 0.5,  # the flat keys W&B charts show are not read back
        "metrics": metrics,
        "status": "completed",
        "overrides": ["pe=alibi"],
        "_step": 3,
    }
    config = {
        "choices": {"pe": "alibi", "task": "copy", "seed": 2},
        "task": {"train_lengths": [1, 16]},
    }
    run = SimpleNamespace(summary=summary, config=config, state="finished", url="https://w/r")
    rec = wandb_record(run)
    assert rec["status"] == "completed" and rec["choices"]["pe"] == "alibi"
    assert rec["metrics"]["test"] == {"8": {"exact_match": 0.5, "token_acc": 0.75}}
    assert rec["metrics"]["test_id"] == {"exact_match": 0.5}
    assert rec["train_lengths"] == [1, 16] and rec["overrides"] == ["pe=alibi"]

    crashed = wandb_record(SimpleNamespace(summary={}, config=config, state="crashed", url=""))
    assert crashed["status"] == "crashed" and crashed["error"] == "W&B state: crashed"
    assert crashed["metrics"] == {}


def test_a_source_that_is_neither_a_directory_nor_wandb_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"neither a directory.*wandb:<entity>/<project>"):
        load_records([tmp_path / "nowhere"])


def test_jobs_come_in_job_order_not_in_string_order(tmp_path):
    for job, pe in ((10, "alibi"), (9, "none")):
        (tmp_path / f"{job}_{pe}_copy_s0").mkdir()
        (tmp_path / f"{job}_{pe}_copy_s0" / "results.json").write_text(
            json.dumps(record(pe, "copy", 0, {8: 1.0}))
        )
    assert [r["choices"]["pe"] for r in directory_records(tmp_path)] == ["none", "alibi"]


def test_a_sweep_rerun_with_skip_completed_is_the_same_grid(tmp_path):
    write_multirun(tmp_path, {}, ["pe=none", "seed=0", "skip_completed=true"])
    choices = {"pe": "none", "task": "copy", **CHOICES}
    done = record("none", "copy", 0, {8: 1.0})
    write_job(tmp_path / "0_none_copy_s0", done, choices, 0, ["pe=none", "seed=0"])  # first run
    records = directory_records(tmp_path)
    assert [r["status"] for r in records] == ["completed"]  # not also "missing"
    rerun = {**done, "overrides": ["pe=none", "seed=0", "skip_completed=true"]}
    assert "skip_completed" not in runs_frame([rerun]).columns  # how it ran, not what it trains


def test_members_of_a_stack_are_runs_of_their_job_and_a_missing_stack_one_per_seed(tmp_path):
    """``seeds=[0,1]`` jobs (``pelab.members``): each member's record sits in ``seed_<k>/`` of
    the job directory; the job is no crashed run, and a stack that never started is missing
    once per seed."""
    sweep = tmp_path / "sweep"
    write_multirun(sweep, {}, ["pe=none,alibi", "seeds=[0,1]"])
    choices = {"pe": "none", "task": "copy", **CHOICES}
    job = write_job(sweep / "0_none_copy_s0-1", None, choices, 0, ["pe=none", "seeds=[0,1]"])
    for seed in (0, 1):
        member = record("none", "copy", seed, {8: 1.0, 16: 0.5, 32: 0.0})
        # written where the sweep ran before it was moved here: the layout finds the job
        member["member_of"] = {"seeds": [0, 1], "dir": "/elsewhere/sweep/0_none_copy_s0-1"}
        (job / f"seed_{seed}").mkdir()
        (job / f"seed_{seed}" / "results.json").write_text(json.dumps(member))

    records = directory_records(tmp_path)
    found = {(r["choices"]["pe"], r["choices"]["seed"]): r["status"] for r in records}
    assert found == {
        ("none", 0): "completed",
        ("none", 1): "completed",
        ("alibi", 0): "missing",
        ("alibi", 1): "missing",
    }
    members = [r for r in records if r["status"] == "completed"]
    assert all(r["overrides"] == ["pe=none", "seeds=[0,1]"] for r in members)
    assert {r["job"] for r in members} == {str(job)}
    assert "seeds" not in runs_frame(records).columns


def test_members_over_learning_rates_are_rows_of_their_learning_rate(tmp_path):
    """``learning_rates=[...]`` jobs: each member's learning rate is its setting
    ``model.optimizer.lr`` (a row of the table, as a sweep over it would give), found or
    missing alike; the list itself is no setting."""
    sweep = tmp_path / "sweep"
    lists = "learning_rates=[0.001,0.003]"
    write_multirun(sweep, {}, ["pe=none,alibi", lists])
    choices = {"pe": "none", "task": "copy", **CHOICES}
    job = write_job(sweep / "0_none_copy_s0", None, choices, 0, ["pe=none", lists])
    for lr in (0.001, 0.003):
        member = record("none", "copy", 0, {8: 1.0, 16: 0.5, 32: 0.0})
        member["config"]["model"] = {"optimizer": {"lr": lr}}
        member["member_of"] = {"seeds": [0], "learning_rates": [0.001, 0.003], "dir": str(job)}
        (job / f"lr_{lr:g}_seed_0").mkdir()
        (job / f"lr_{lr:g}_seed_0" / "results.json").write_text(json.dumps(member))

    runs = runs_frame(directory_records(tmp_path))
    found = {(r["pe"], r["model.optimizer.lr"]): r["status"] for _, r in runs.iterrows()}
    assert found == {
        ("none", "0.001"): "completed",
        ("none", "0.003"): "completed",
        ("alibi", "0.001"): "missing",
        ("alibi", "0.003"): "missing",
    }
    assert "learning_rates" not in runs.columns and set(runs["seed"]) == {0}


def test_local_sources_are_filtered_like_wandb_runs():
    rope = record("rope", "copy", 0, {8: 1.0})
    rope["config"] |= {
        "tags": ["cpu"],
        "run_name": "ablation_cpu",
        "model": {"net": {"d_model": 32}},
    }
    alibi = record("alibi", "sort", 1, {8: 1.0})
    assert matches(rope, {"pe": "rope", "task": "copy", "seed": "0"})
    assert not matches(alibi, {"pe": "rope"}) and not matches(alibi, {"seed": "0"})
    assert matches(rope, {"tag": "cpu", "config.run_name": "ablation_cpu"})
    assert matches(rope, {"config.model.net.d_model": "32"}) and not matches(alibi, {"tag": "cpu"})
    rope["started"] = "2026-11-24T04:00:00+00:00"
    assert matches(rope, {"date": "2026-11-24"}) and matches(rope, {"date": "2026-11"})
    assert not matches(rope, {"date": "2026-11-23"}) and not matches(alibi, {"date": "2026"})
    with pytest.raises(ConfigError, match=r"unknown key 'colour'; valid keys: model, pe, task"):
        matches(rope, {"colour": "red"})


def test_a_filtered_directory_keeps_the_matching_runs(tmp_path):
    for pe in ("rope", "alibi"):
        (tmp_path / pe).mkdir()
        (tmp_path / pe / "results.json").write_text(json.dumps(record(pe, "copy", 0, {8: 1.0})))
    found = load_records([tmp_path], {"pe": "alibi"})
    assert [r["choices"]["pe"] for r in found] == ["alibi"]


def test_a_setting_equal_after_resolution_is_one_value_however_it_was_set():
    """The default learning rate (3e-3), a learning_rates=[...] member's 0.003 and an override's
    3e-3 are one setting: one row of a table, not three."""
    default, member, override = (
        record("rope", "copy", s, {8: 1.0, 32: 0.5}, overrides=o)
        for s, o in ((0, ["seeds=[0,1]"]), (1, ["learning_rates=[1e-3,3e-3]"]), (2, []))
    )
    override["overrides"] = ["model.optimizer.lr=3e-3"]
    for rec in (default, member, override):
        rec["config"]["model"] = {"optimizer": {"lr": 0.003}}
    default["member_of"] = {"seeds": [0, 1], "learning_rates": None}
    member["member_of"] = {"seeds": [1], "learning_rates": [0.001, 0.003]}
    crashed = record("rope", "copy", 3, status="failed", overrides=[])  # no resolved config
    runs = runs_frame([default, member, override, crashed])
    assert list(runs["model.optimizer.lr"]) == ["0.003", "0.003", "0.003", NOT_SET]


def test_a_re_evaluation_table_has_the_run_as_trained_and_whether_it_learned(tmp_path):
    from pelab.analysis.collect import eval_records

    job = tmp_path / "run"
    trained = record("rope", "copy", 0, {8: 1.0, 32: 0.1}, learned=False, overrides=["pe=rope"])
    trained |= {"job_type": "train"}
    trained["config"]["pe"] = {"scaling": "none"}
    write_job(job, trained, {"pe": "rope", "task": "copy", **CHOICES}, 0, ["pe=rope"])
    for name, scaling in (("yarn", "yarn"), ("pi", "pi")):
        evaluation = record("rope", "copy", 0, {8: 1.0, 32: 0.3}) | {"job_type": "eval"}
        evaluation |= {"eval_overrides": [f"pe.scaling={scaling}"]}
        evaluation["config"]["pe"] = {"scaling": scaling}
        (job / "eval" / name).mkdir(parents=True)
        (job / "eval" / name / "results.json").write_text(json.dumps(evaluation))
    runs = runs_frame(eval_records(tmp_path))
    assert sorted(runs["pe.scaling"]) == ["none", "pi", "yarn"]  # "none": the run as trained
    assert list(runs["learned"]) == [False, False, False]  # the training run's outcome


def test_an_evaluation_as_trained_is_not_counted_twice(tmp_path):
    from pelab.analysis.collect import eval_records

    job = tmp_path / "run"
    trained = record("rope", "copy", 0, {8: 1.0, 32: 0.1}, learned=True) | {"job_type": "train"}
    trained["config"]["pe"] = {"scaling": "none"}
    write_job(job, trained, {"pe": "rope", "task": "copy", **CHOICES}, 0, ["pe=rope"])
    evaluation = record("rope", "copy", 0, {8: 1.0, 32: 0.1}) | {"job_type": "eval"}
    evaluation |= {"eval_overrides": ["pe.scaling=none"], "config": trained["config"]}
    (job / "eval" / "none").mkdir(parents=True)
    (job / "eval" / "none" / "results.json").write_text(json.dumps(evaluation))
    assert len(eval_records(tmp_path)) == 1
