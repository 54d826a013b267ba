"""Baselines: a sweep's records shipped in baselines/, a new encoding's runs tabulated beside
them when the protocols agree, refused with the differing keys when they do not."""

import json
import warnings
from collections import Counter

import pandas as pd
import pytest
from omegaconf import OmegaConf

from pelab.analysis import baseline
from pelab.analysis.report import main as make_table
from pelab.config_files import preset_grid
from pelab.errors import ConfigError
from tests.analysis.records import record, write_job
from tests.conftest import compose_config
from tests.readme_rows import not_shipped, readme_names

pytestmark = pytest.mark.usefixtures("tables_only")  # they read tables, notes and plans

SEEDS = [0, 1, 2]


def compare(mine, out, name="ablation_cpu"):
    """``make_table.py <mine> --baseline <name>``'s exit status."""
    return make_table([str(mine), "--baseline", name, "--out", str(out)])


def config(pe, task, seed, run, checkout, changes):
    """A resolved config as a run of ``ablation_cpu`` records it; ``changes``: dotted keys."""
    cfg = {
        "run_name": "ablation_cpu",
        "tags": ["ablation", "cpu"],
        "seed": seed,
        "seeds": None,
        "threads": "auto",
        "learned_at": 0.98,
        "data": {"batch_size": 32, "length_sampling": "tokens"},
        "model": {"net": {"d_model": 64, "n_layers": 2}, "optimizer": {"lr": 0.003}},
        "pe": {"_target_": f"pelab.pe.{pe}", "base": 10000.0},
        "task": {"_target_": f"pelab.tasks.{task}", "train_lengths": [1, 16], "n_test": 512},
        "trainer": {"max_steps": 4000, "default_root_dir": str(run), "log_every_n_steps": 10},
        "callbacks": {"last_checkpoint": {"dirpath": str(run / "checkpoints")}},
        "logger": {"wandb": {"save_dir": str(run)}},
        "paths": {
            "root_dir": str(checkout),
            "log_dir": str(checkout / "logs"),
            "output_dir": str(run),
            "cache_dir": "/elsewhere/cache/pelab",
        },
    }
    for key, value in changes.items():
        *parents, last = key.split(".")
        node = cfg
        for part in parents:
            node = node[part]
        node[last] = value
    return cfg


def write_sweep(sweep, pes, tasks=("copy", "reverse"), **changes):
    """A sweep as ``experiment=ablation_cpu`` leaves it: one job per encoding and task, a member
    per seed (``results.json`` beside its checkpoints), Hydra's files, a log."""
    for pe in pes:
        for task in tasks:
            job = sweep / f"{pe}_{task}"
            choices = {"pe": pe, "task": task}
            write_job(job, None, choices, 0, [f"pe={pe}", f"task={task}", "seeds=[0,1,2]"])
            (job / "train.log").write_text("log\n")
            for seed in SEEDS:
                run = job / f"seed_{seed}"
                exact = {8: 0.9 + 0.02 * seed, 16: 0.8 + 0.05 * seed, 32: 0.1 * seed}
                rec = record(pe, task, seed, exact, learned=True, steps_to_learn=1000)
                del rec["source"], rec["overrides"]  # collect's, not the file's
                rec["config"] = config(pe, task, seed, run, sweep.parent / "checkout", changes)
                rec["member_of"] = {"seeds": SEEDS, "learning_rates": None, "dir": str(job)}
                (run / "checkpoints").mkdir(parents=True)
                (run / "checkpoints" / "best.ckpt").write_bytes(b"weights")
                (run / "results.json").write_text(json.dumps(rec))
    return sweep


def strings(value):
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return [value] if isinstance(value, str) else []


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    """``baselines/ablation_cpu`` (in tmp_path) saved from a sweep of rope and alibi."""
    monkeypatch.setattr(baseline, "BASELINES", tmp_path / "baselines")
    baseline.save(write_sweep(tmp_path / "zoo", ["rope", "alibi"]), "ablation_cpu")
    return tmp_path / "baselines" / "ablation_cpu"


def test_saving_a_sweep_copies_its_records_only_with_no_absolute_path(tmp_path, monkeypatch):
    monkeypatch.setattr(baseline, "BASELINES", tmp_path / "baselines")
    old = write_sweep(tmp_path / "old", ["rope"], tasks=["copy"])
    moved = old.rename(tmp_path / "moved")  # the records name where the sweep ran, not where it is
    written = baseline.save(moved, "zoo")
    files = [p for p in (tmp_path / "baselines" / "zoo").rglob("*") if p.is_file()]
    assert sorted(files) == sorted(written)
    assert {p.relative_to(tmp_path / "baselines" / "zoo").as_posix() for p in files} == {
        f"rope_copy/seed_{s}/results.json" for s in SEEDS
    }
    for path in files:
        text = strings(json.loads(path.read_text()))
        assert not [s for s in text if s.startswith("/") or str(tmp_path) in s]
    rec = json.loads(files[0].read_text())
    run = files[0].parent.relative_to(tmp_path / "baselines" / "zoo").as_posix()
    assert rec["config"]["trainer"]["default_root_dir"] == run
    assert rec["config"]["paths"] == {
        "root_dir": ".",
        "log_dir": "logs",
        "output_dir": run,
        "cache_dir": None,  # outside the sweep and the checkout: nothing to make relative to
    }
    assert rec["member_of"]["dir"] == "rope_copy"
    assert rec["metrics"]["test"]["8"]["exact_match"] > 0.89  # the results themselves kept


def test_a_sweep_whose_runs_of_a_task_differ_is_not_saved(tmp_path, monkeypatch):
    monkeypatch.setattr(baseline, "BASELINES", tmp_path / "baselines")
    sweep = write_sweep(tmp_path / "sweep", ["rope"], tasks=["copy"])
    write_sweep(sweep, ["alibi"], tasks=["copy"], **{"trainer.max_steps": 2000})
    with pytest.raises(ConfigError, match="task copy differ in protocol: trainer.max_steps"):
        baseline.save(sweep, "zoo")
    assert not (tmp_path / "baselines").exists()


def test_same_protocol_one_table_of_both_with_intervals(shipped, tmp_path):
    # your encoding, and rope again: the origin column tells the two rope rows apart; your
    # seeds, paths, run's directory and encoding's parameters may differ from the baseline's
    mine = write_sweep(tmp_path / "mine", ["mine", "rope"], **{"pe.base": 500.0})
    out = tmp_path / "table"
    assert compare(mine, out) == 0
    stats = pd.read_csv(out / "table_tasks.csv")
    rows = stats[["pe", "origin"]].drop_duplicates().values.tolist()
    assert rows == [["mine", "yours"], ["rope", "yours"], ["rope", "ablation_cpu"]] + [
        ["alibi", "ablation_cpu"]
    ]
    assert set(stats["task"]) == {"copy", "reverse"} and stats["n"].eq(3).all()
    assert stats["ci95_low"].notna().all()
    markdown = (out / "table_tasks.md").read_text()
    # ID: lengths 8 and 16, seeds 0.85, 0.885, 0.92: mean 88.5, its 95% interval over 3 seeds
    assert "| alibi | ablation_cpu | 88.5 [79.8, 97.2] (3/3) |" in markdown
    assert "| mine  | yours        | 88.5 [79.8, 97.2] (3/3) |" in markdown


def test_differing_protocols_are_refused_naming_each_key_and_values(shipped, tmp_path, capsys):
    changes = {"trainer.max_steps": 2000, "data.batch_size": 64, "pe.base": 500.0}
    mine = write_sweep(tmp_path / "mine", ["mine"], tasks=["copy"], **changes)
    out = tmp_path / "table"
    assert compare(mine, out) == 2
    err = capsys.readouterr().err
    assert "--baseline ablation_cpu: protocols differ: " in err
    assert "trainer.max_steps 4000 (baseline) vs 2000 (yours)" in err
    assert "data.batch_size 32 (baseline) vs 64 (yours)" in err
    assert "pe.base" not in err and "paths" not in err and "seed" not in err
    assert not out.exists()


def test_the_compared_setting_may_differ_the_baseline_row_its_control(shipped, tmp_path):
    """Issue 45: RoPE with Scalable-Softmax was refused against the baseline whose RoPE is its
    control. A length scale, the positions and the encoding's options may differ; the baseline
    is narrowed to your tasks and by ``--filter``; a baseline record from before
    ``attn_scale`` existed shows its default (``none``), not ``-``."""
    mine = write_sweep(
        tmp_path / "mine", ["rope"], tasks=["copy"], **{"model.net.attn_scale": "ssmax"}
    )
    for path in mine.glob("*/.hydra/overrides.yaml"):  # as the sweep with the override has it
        given = OmegaConf.load(path)
        OmegaConf.save(OmegaConf.create([*given, "model.net.attn_scale=ssmax"]), path)
    out = tmp_path / "table"
    assert make_table([str(mine), "--baseline", "ablation_cpu", "--out", str(out),
                       "--filter", "pe=rope,alibi", "--filter", "task=copy"]) == 0  # fmt: skip
    stats = pd.read_csv(out / "table_tasks.csv")
    rows = stats[["pe", "model.net.attn_scale", "origin"]].drop_duplicates().values.tolist()
    assert rows == [
        ["rope", "ssmax", "yours"], ["rope", "none", "ablation_cpu"],
        ["alibi", "none", "ablation_cpu"],
    ]  # fmt: skip
    assert set(stats["task"]) == {"copy"}  # not the baseline's reverse: you ran copy only
    out2 = tmp_path / "table2"
    assert make_table([str(mine), "--baseline", "ablation_cpu", "--out", str(out2),
                       "--filter", "pe=rope"]) == 0  # fmt: skip
    assert set(pd.read_csv(out2 / "table_tasks.csv")["pe"]) == {"rope"}


def test_filter_takes_several_values_and_an_empty_selection_blames_the_filter(
    shipped, tmp_path, capsys
):
    zoo = tmp_path / "zoo"
    assert make_table([str(zoo), "--list", "--filter", "pe=rope,alibi"]) == 0
    listed = capsys.readouterr().out
    assert "rope" in listed and "alibi" in listed
    assert make_table([str(zoo), "--list", "--filter", "pe=xpos,cope"]) == 2
    err = capsys.readouterr().err
    assert f"no runs (results.json) under {zoo} match --filter pe=xpos,cope" in err


def test_a_task_the_baseline_lacks_is_a_difference(shipped, tmp_path):
    mine = write_sweep(tmp_path / "mine", ["mine"], tasks=["sort"])
    with pytest.raises(ConfigError, match=r"task copy, reverse \(baseline\) vs sort \(yours\)"):
        baseline.check(baseline.load_records([mine]), "ablation_cpu")


def test_an_unknown_baseline_is_refused_listing_the_shipped_ones(shipped, tmp_path, capsys):
    with pytest.raises(ConfigError, match="unknown baseline; shipped in .*: ablation_cpu"):
        baseline.find("ablation_gpu")
    mine = write_sweep(tmp_path / "mine", ["mine"])
    assert compare(mine, tmp_path / "table", "nope") == 2
    assert "--baseline nope: unknown baseline" in capsys.readouterr().err


def test_origin_names_the_baseline_a_run_lies_in(shipped, tmp_path):
    assert baseline.origin(shipped / "rope_copy" / "seed_0") == "ablation_cpu"
    assert baseline.origin(tmp_path / "mine" / "seed_0") == baseline.YOURS
    assert baseline.origin("https://wandb.ai/me/pelab/runs/x") == baseline.YOURS


def test_every_shipped_baseline_is_described_loads_and_shares_one_protocol_per_task():
    """What the repository ships, so a baseline cannot rot: records only (and the looks that
    added seeds to them, ``looks.json``), each loads, one protocol per task, no absolute path,
    described in baselines/README.md."""
    readme = (baseline.BASELINES / "README.md").read_text()
    for name in baseline.available():
        records = baseline.load(name)  # refuses a baseline without records
        assert baseline.protocols(records, f"baseline {name}"), name
        files = [p for p in baseline.find(name).rglob("*") if p.is_file()]
        assert {p.name for p in files} <= {"results.json", "looks.json"}, name
        for path in files:
            assert not [s for s in strings(json.loads(path.read_text())) if s.startswith("/")]
        assert f"`{name}`" in readme, f"baselines/README.md does not describe {name}"


@pytest.mark.parametrize("task", ["copy", "reverse", "sort"])
def test_the_shipped_ablation_is_the_protocol_its_preset_composes_now(task, tmp_path):
    """A changed default or a new config key makes every user run differ from the shipped
    records: this fails first, so the baseline is refreshed (baselines/README.md) with it."""
    cfg = compose_config(["experiment=ablation_cpu", f"task={task}"], tmp_path)
    now = {"config": OmegaConf.to_container(cfg, resolve=True), "choices": {"task": task}}
    assert baseline.check([now], "ablation_cpu")


def test_the_shipped_ablation_holds_three_seeds_of_every_cell_of_its_grid():
    """Every shipped encoding the preset sweeps (named in the README's Components row, or with
    runs here) has seeds 0, 1 and 2 of every cell; seeds added where they decide a comparison
    (``make_table.py --add-seeds``) come on top, and no cell lies beyond the grid. A new
    encoding joins the preset's grid by its config file (the glob) before it ships: reported
    (issue 54), not failed, until its runs are added (baselines/README.md)."""
    grid = preset_grid("ablation_cpu")
    records = baseline.load("ablation_cpu")
    first = [r["choices"] for r in records if r["choices"]["seed"] in (0, 1, 2)]
    cells = Counter((c["pe"], c["task"]) for c in first)
    held = {pe for pe, _ in cells}
    new = [pe for pe in grid["pe"] if pe not in held and pe not in readme_names("pe")]
    if new:
        warnings.warn(not_shipped(new), stacklevel=1)
    shipped = [pe for pe in grid["pe"] if pe not in new]
    assert cells == {(pe, task): 3 for pe in shipped for task in grid["task"]}
    assert {(r["choices"]["pe"], r["choices"]["task"]) for r in records} == set(cells)


def test_the_table_docs_results_shows_is_the_shipped_baselines_own():
    """docs/results.md prints the shipped baseline's token-accuracy table (issue 53, item 5):
    regenerated from ``baselines/ablation_cpu``'s records, every row and cell is as printed, so a
    baseline refreshed without its page, or a page edited by hand, fails here."""
    from pelab.analysis.collect import load_records
    from pelab.analysis.frames import lengths_frame, runs_frame
    from pelab.analysis.render import to_markdown
    from pelab.analysis.table import ablation

    records = load_records([baseline.find("ablation_cpu")])
    result = ablation(runs_frame(records), lengths_frame(records), "token_acc")
    (table,) = [t for t in result.per_metric() if t.stem == "table_tasks.token_acc"]
    expected = to_markdown(table.stats, result.rows, table.cols)
    page = (baseline.find("ablation_cpu").parents[1] / "docs" / "results.md").read_text()
    section = page.split("## The CPU ablation at 5 seeds", 1)[1].split("\n## ", 1)[0]
    assert expected in section
    assert "| path " in expected and "(5/5)" in expected  # the 5-seed records, not another
