"""A run started by a W&B sweep agent, simulated offline (no network): the agent locks the swept
keys to their values, so the resolved ``task`` config never reaches W&B; the table reads the run
all the same."""

from types import SimpleNamespace

import pytest
import wandb
import yaml
from wandb.sdk.wandb_summary import SummaryDict

from pelab.analysis.frames import lengths_frame, runs_frame
from pelab.analysis.table import ablation
from pelab.analysis.wandb_records import wandb_record
from pelab.train import train


def plain(value):
    """W&B's summary (nested ``SummarySubDict``s) as plain data, as the API returns it."""
    if isinstance(value, SummaryDict | dict):
        return {k: plain(value[k]) for k in value.keys()}  # noqa: SIM118 (SummaryDict: keys())
    return [plain(v) for v in value] if isinstance(value, list | tuple) else value


@pytest.mark.integration
def test_a_run_of_a_wandb_sweep_agent_is_tabulated(tiny_cfg, tmp_path, monkeypatch):
    params = tmp_path / "sweep_params.yaml"  # what `wandb agent` hands the run it starts
    params.write_text(yaml.safe_dump({"pe": {"value": "rope"}, "task": {"value": "copy"}}))
    monkeypatch.setenv("WANDB_SWEEP_ID", "simulated")
    monkeypatch.setenv("WANDB_SWEEP_PARAM_PATH", str(params))
    # W&B reads the sweep's environment when its process-wide setup is made: an earlier run in
    # this process (another test) made it without, as an agent's fresh process never would
    wandb.teardown()
    seen = {}
    finish = wandb.finish

    def capture(*args, **kwargs):  # the run as W&B holds it when pelab closes it
        seen["config"] = dict(wandb.run.config)
        seen["summary"] = plain(wandb.run.summary)
        finish(*args, **kwargs)

    monkeypatch.setattr(wandb, "finish", capture)
    try:
        [record] = train(tiny_cfg("logger=wandb", "pe=rope", "task=copy"))
    finally:  # nor may the sweep's setup outlive the test: W&B would keep it for later runs,
        monkeypatch.undo()  # which then ignore the run id pelab hands them
        wandb.teardown()
    seen = SimpleNamespace(  # as wandb.Api returns it
        config=seen["config"],
        summary=seen["summary"],
        state="finished",
        url="https://wandb.ai/simulated",
        job_type="train",
    )
    assert seen.config["task"] == "copy"  # locked by the sweep: the simulation is faithful
    read = wandb_record(seen)
    assert read["choices"]["pe"] == "rope" and read["train_lengths"] == record["train_lengths"]
    assert read["metrics"]["test"] == record["metrics"]["test"]
    runs = runs_frame([read])
    assert (runs.loc[0, "train_min"], runs.loc[0, "train_max"]) == tuple(record["train_lengths"])
    table = ablation(runs, lengths_frame([read]))
    assert table.by_task["n"].tolist() == [1] * 4  # ID and OOD of copy, each metric, one run
