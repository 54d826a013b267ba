"""The run's callbacks: a short run validates and checkpoints its last step."""

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from pelab.member_state import MemberState
from pelab.reliability.resume.callbacks import ResumeState
from pelab.train import train
from tests.reliability.faults import InjectFault
from tests.reliability.runs import checkpoint


@pytest.mark.parametrize(("max_steps", "validated"), [(3, [2, 3]), (3, [3]), (4, [2, 4])])
@pytest.mark.integration
def test_the_last_step_is_validated_and_saved_whatever_the_interval(
    tiny_cfg, max_steps, validated
):
    """Every ``val_check_interval`` steps and at the last one: a run shorter than the interval
    (150 steps with validation every 200) still has validation metrics, a ``best.ckpt`` to test
    and evaluate, and a ``last.ckpt`` at its last step."""
    interval = validated[0] if len(validated) > 1 else 10
    cfg = tiny_cfg(f"trainer.max_steps={max_steps}", f"trainer.val_check_interval={interval}")
    [record] = train(cfg)
    assert record["status"] == "completed" and record["metrics"]["val"]
    out = cfg.paths.output_dir
    assert checkpoint(f"{out}/checkpoints/last.ckpt")["global_step"] == max_steps
    assert checkpoint(f"{out}/checkpoints/best.ckpt")["global_step"] in validated
    logged = pd.read_csv(next(Path(out, "csv").glob("*/metrics.csv")))
    assert logged["val/id/exact_match"].notna().sum() == len(validated)


def test_resume_state_reads_and_sets_only_the_runs_gpu(monkeypatch):
    """A job on GPU 2 of its node saves that GPU's generator alone (no context opened on the
    others); the checkpoint resumes on GPU 0 of a one-GPU machine, and one written before (every
    GPU's states, a list) gives that GPU its own."""
    read, written = [], []
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda d: read.append(d) or torch.ones(3))
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: pytest.fail("every GPU read"))
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s, d: written.append((s, d)))
    saved = ResumeState({"run": 1})
    saved.on_fit_start(None, SimpleNamespace(device=torch.device("cuda", 2)))
    state = saved.state_dict()
    assert read == [torch.device("cuda", 2)] and torch.equal(state["rng"]["cuda"], torch.ones(3))

    resumed = ResumeState({"run": 1})
    resumed.load_state_dict(state)
    one_gpu = SimpleNamespace(device=torch.device("cuda", 0))
    resumed.on_train_batch_start(None, one_gpu, None, 0)
    assert len(written) == 1 and written[0][1] == torch.device("cuda", 0)
    assert torch.equal(written[0][0], torch.ones(3))

    old = dict(state, rng=dict(state["rng"], cuda=[torch.zeros(3), torch.full((3,), 2.0)]))
    resumed.load_state_dict(old)
    resumed.on_train_batch_start(None, SimpleNamespace(device=torch.device("cuda", 1)), None, 0)
    assert torch.equal(written[1][0], torch.full((3,), 2.0))
    cpu = ResumeState({"run": 1})  # a CPU run saves no GPU state and sets none
    cpu.on_fit_start(None, SimpleNamespace(device=torch.device("cpu")))
    assert "cuda" not in cpu.state_dict()["rng"]
    cpu.load_state_dict(old)
    cpu.on_train_batch_start(None, SimpleNamespace(device=torch.device("cpu")), None, 0)
    assert len(written) == 2


def test_a_fault_by_seed_fires_in_the_job_of_any_member_of_that_seed(tmp_path):
    """``fault(..., seed=s)`` reaches member 1 of a stack as it reaches a single run of ``s``."""
    marker = tmp_path / "fired"
    fault = InjectFault(at_step=2, action="mark", marker=str(marker), seed=3)
    trainer = SimpleNamespace(global_step=2)
    members = [MemberState(0), MemberState(1)]
    fault.on_train_batch_start(trainer, SimpleNamespace(members=members), None, 0)
    assert not marker.exists()  # no member of seed 3
    members[1] = MemberState(3)
    fault.on_train_batch_start(trainer, SimpleNamespace(members=members), None, 0)
    assert marker.exists()  # member 1 is of seed 3
