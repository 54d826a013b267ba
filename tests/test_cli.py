"""The real command line, in a subprocess: every encoding on every task, as one Hydra multirun."""

import json
import os
import subprocess
import sys

from pelab.pe import PE_REGISTRY
from tests.test_configs import options


def test_every_encoding_trains_on_every_task_through_the_cli(tmp_path, repo_root):
    encodings, tasks = sorted(PE_REGISTRY), options("task")
    sweep = tmp_path / "sweep"
    cmd = [
        sys.executable,
        "scripts/train.py",
        "-m",
        f"pe={','.join(encodings)}",
        f"task={','.join(tasks)}",
        "model.net.d_model=16",
        "model.net.n_heads=2",
        "model.net.n_layers=1",
        "trainer.max_steps=2",
        "trainer.val_check_interval=1",
        "task.n_val=4",
        "task.n_test=4",
        "data.batch_size=4",
        "data.eval_batch_size=4",
        f"hydra.sweep.dir={sweep}",
        f"paths.cache_dir={tmp_path / 'cache'}",
    ]
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    proc = subprocess.run(
        cmd,
        cwd=repo_root,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert len(runs) == len(encodings) * len(tasks)
    seen = set()
    for run_dir in runs:
        res = json.loads((run_dir / "results.json").read_text())
        assert res["status"] == "completed", run_dir
        seen.add((res["choices"]["pe"], res["choices"]["task"]))
        assert run_dir.name.endswith(f"_{res['choices']['pe']}_{res['choices']['task']}_s0")
        assert list((run_dir / "wandb").glob("offline-run-*/*.wandb")), run_dir
    assert seen == {(p, t) for p in encodings for t in tasks}


def test_a_bad_choice_fails_fast_with_the_valid_options(repo_root):
    proc = subprocess.run(
        [sys.executable, "scripts/train.py", "pe=rotary"],
        cwd=repo_root,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "Could not find 'pe/rotary'" in proc.stderr and "rope" in proc.stderr
