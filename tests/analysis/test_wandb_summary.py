"""The summary W&B run of a table (``make_table.py --wandb``): the runs' project and group, both
tables, the PNG figures; none without ``--wandb``."""

import pytest
import wandb

from pelab.analysis import report, report_options, wandb_summary
from pelab.analysis.frames import lengths_frame, runs_frame
from pelab.analysis.render import write_tables
from pelab.analysis.table import ablation
from tests.analysis.records import CHOICES, record, write_job


class FakeRun:
    def __init__(self, **settings):
        self.settings, self.logged, self.finished = settings, {}, False

    def log(self, data):
        self.logged |= data

    def finish(self):
        self.finished = True


@pytest.fixture
def runs(monkeypatch):
    """Every ``wandb.init`` as a ``FakeRun``; tables and images as what they were made of."""
    made = []
    monkeypatch.setattr(wandb, "init", lambda **kw: made.append(FakeRun(**kw)) or made[-1])
    monkeypatch.setattr(wandb, "Table", lambda dataframe: ("table", dataframe))
    monkeypatch.setattr(wandb, "Image", lambda path: ("image", path))
    return made


def records_in(groups: list[str]) -> list[dict]:
    out = []
    for seed, group in enumerate(groups):
        rec = record("rope", "copy", seed, {8: 0.5, 16: 0.5, 32: 0.25})
        rec["config"]["logger"] = {"wandb": {"project": "mine", "group": group}}
        out.append(rec)
    return out


@pytest.mark.parametrize(("groups", "group"), [(["g", "g"], "g"), (["g", "h"], None)])
def test_one_summary_run_in_the_runs_project_and_their_group(tmp_path, runs, groups, group):
    records = records_in(groups)
    result = ablation(runs_frame(records), lengths_frame(records), "token_acc")
    write_tables(result, tmp_path)
    figures = [tmp_path / "heatmap.png", tmp_path / "heatmap.pdf"]
    wandb_summary.log_summary(result, records, tmp_path, figures)
    [run] = runs
    assert run.settings["project"] == "mine" and run.settings["group"] == group
    assert run.settings["job_type"] == "summary" and run.settings["name"] == "table-token_acc"
    assert run.settings["dir"] == str(tmp_path)
    config = run.settings["config"]
    assert {k: config[k] for k in ("metric", "rows", "runs")} == {
        "metric": "token_acc",
        "rows": ["pe"],
        "runs": 2,
    }
    assert "Protocol: mean over seeds. Seeds per cell: 2." in config["caption"]
    assert sorted(run.logged) == ["heatmap", "table_lengths", "table_tasks"]  # PNGs only
    assert run.logged["heatmap"] == ("image", str(tmp_path / "heatmap.png"))
    kind, frame = run.logged["table_tasks"]
    assert kind == "table" and set(frame["pe"]) >= {"rope"}
    assert run.finished


def test_runs_without_wandb_settings_go_to_the_pelab_project(tmp_path, runs):
    records = [record("rope", "copy", 0, {8: 0.5, 16: 0.5, 32: 0.25})]
    result = ablation(runs_frame(records), lengths_frame(records))
    write_tables(result, tmp_path)
    wandb_summary.log_summary(result, records, tmp_path, [])
    assert (runs[0].settings["project"], runs[0].settings["group"]) == ("pelab", None)


def test_make_table_logs_its_summary_to_wandb_only_when_asked(tmp_path, runs):
    """Only training and re-evaluation make W&B runs unless asked (``--wandb``)."""
    sweep, choices = tmp_path / "sweep", {"pe": "rope", "task": "copy", **CHOICES}
    for seed in (0, 1):
        rec = record("rope", "copy", seed, {8: 0.5, 16: 0.5, 32: 0.25})
        write_job(sweep / str(seed), rec, choices, seed, [f"seed={seed}"])
    assert report.main([str(sweep), "--out", str(tmp_path / "summary")]) == 0
    assert runs == [] and (tmp_path / "summary" / "table_tasks.md").is_file()
    assert (
        report_options.parse([str(sweep), "--wandb"]).wandb
        and not report_options.parse([str(sweep)]).wandb
    )
