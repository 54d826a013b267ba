"""Tiny runs for fault-injection tests: in-process and through the real command line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import torch

from pelab.record import RESULTS, job_key
from tests import zygote
from tests.conftest import TINY, compose_config

REPO = Path(__file__).resolve().parents[2]
# a run's processes in a test: W&B offline and quiet, and the repository on PYTHONPATH, so that
# each of them imports the tests' hooks its overrides name (``fault``): a fresh interpreter, the
# parallel launcher's fork server and a submitit job do not start with the tests imported
SWEEP_ENV = {
    "WANDB_MODE": "offline",
    "WANDB_SILENT": "true",
    "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
}

# 8 steps, validation (and last.ckpt) at steps 4 and 8; dropout draws from the global RNG in
# training, so an exact resume must restore it; randomized positions come from (seed, step).
# 128 test samples per length: other weights (another step's, a stray checkpoint's) give other
# test scores, so comparing records catches a run that tested the wrong weights.
RESUMABLE = [
    *TINY,
    "task.n_test=128",
    "logger=csv",
    "trainer.max_steps=8",
    "trainer.val_check_interval=4",
    "task.train_lengths=[1,8]",
    "task.eval_lengths=[8,12]",
    "model.net.dropout=0.1",
    "positions=randomized",
    "positions.max_position=64",
    "trainer.enable_progress_bar=false",
    "callbacks.progress_bar=null",
]


def fault(
    action: str,
    at_step: int,
    marker: Path | None = None,
    name="fault",
    seed: int | None = None,
    during: str = "train",
    seconds: float | None = None,
) -> list[str]:
    """Overrides that add ``InjectFault`` (a test hook, ``tests.reliability.faults``) to a run as
    ``callbacks.<name>``; a run in a process of its own imports it with ``SWEEP_ENV``."""
    hook = f"+callbacks.{name}."
    out = [
        f"{hook}_target_=tests.reliability.faults.InjectFault",
        f"{hook}at_step={at_step}",
        f"{hook}action={action}",
        f"{hook}during={during}",
    ]
    out += [f"{hook}marker={marker}"] if marker else []
    out += [f"{hook}seconds={seconds}"] if seconds is not None else []
    return out + ([f"{hook}seed={seed}"] if seed is not None else [])


def sweep_job(sweep_dir: Path, pe: str, task: str, seed: int, *overrides: str) -> Path:
    """The directory of the job of ``sweep_cli`` whose overrides (besides ``RESUMABLE``) are
    ``overrides``: ``<pe>_<task>_s<seed>_<job_key>`` (``configs/hydra/default.yaml``)."""
    return sweep_dir / f"{pe}_{task}_s{seed}_{job_key([*RESUMABLE, *overrides])}"


def config(tmp_path: Path, output_dir: Path, *overrides: str):
    cfg = compose_config([*RESUMABLE, *overrides], tmp_path)
    cfg.paths.output_dir = str(output_dir)
    return cfg


def default_sigint() -> None:
    """In the child before it starts: Ctrl-C (SIGINT) acts as it does from a terminal. A test
    suite run as a background job of a non-interactive shell ignores SIGINT, and a child would
    inherit that, so an injected Ctrl-C would do nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def cli(
    repo_root: Path,
    tmp_path: Path,
    output_dir: Path,
    *overrides: str,
    wait: bool = True,
    env=None,
    fresh: bool = False,
):
    """``scripts/train.py`` with ``RESUMABLE`` in ``output_dir``, forked from the tests'
    pre-imported Python (``tests.zygote``; ``fresh``: a new interpreter); closed stdin,
    Python's Ctrl-C, no W&B prompt."""
    cmd = [
        "scripts/train.py",
        *RESUMABLE,
        *overrides,
        f"hydra.run.dir={output_dir}",
        f"paths.cache_dir={tmp_path / 'cache'}",
    ]
    env = {**os.environ, **SWEEP_ENV, **(env or {})}
    if not wait:
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
        return zygote.start(cmd, cwd=repo_root, env=env, fresh=fresh, **quiet)
    return zygote.run(cmd, cwd=repo_root, env=env, timeout=300)


def results(output_dir: Path) -> dict:
    return json.loads((output_dir / "results.json").read_text())


def checkpoint(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def same_weights(a: Path, b: Path) -> bool:
    """Bitwise equality of two checkpoints' model weights."""
    sa, sb = checkpoint(a)["state_dict"], checkpoint(b)["state_dict"]
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


# What may differ between a run and its uninterrupted twin: when and how long it ran (and where
# its time went), where, from which checkout, the checkpoint it resumed from, and the hooks that
# interrupted it (its config)
ATTEMPT_KEYS = (
    "started",
    "git_commit",
    "git_dirty",
    "git_changes",
    "git_patch",
    "git_patch_sha256",
    "wall_time_s",
    "wall_time_parts_s",
    "time_split_s",
    "peak_rss_mb",
    "resumed_from",
    "resumed_from_step",
    "config",
    "checkpoint",
)


def assert_same_record(record: dict, output_dir: Path, twin: dict, twin_dir: Path) -> None:
    """``record`` (of the run in ``output_dir``) says what its uninterrupted ``twin`` says: every
    key but ``ATTEMPT_KEYS`` equal (status, test and validation scores per length, learned,
    steps to learn, stop reason, sizes, ...), and its test scores come from the same checkpoint
    of its own directory (``checkpoint``, at ``checkpoint_step``)."""
    assert record["status"] == "completed" == twin["status"]
    mine, theirs = ({k: v for k, v in r.items() if k not in ATTEMPT_KEYS} for r in (record, twin))
    for r in (mine, theirs):  # a stack member's: where the stack ran, and how long
        if "member_of" in r:
            r["member_of"] = {
                k: v for k, v in r["member_of"].items() if k not in ("dir", "fit_time_s")
            }
    assert mine == theirs
    assert Path(record["checkpoint"]).relative_to(output_dir) == Path(
        twin["checkpoint"]
    ).relative_to(twin_dir)


def assert_same_as_twin(output_dir: Path, record: dict, reference: tuple[Path, dict]) -> None:
    """The run in ``output_dir`` ended as the uninterrupted ``reference`` (its directory and
    record): the same record (``assert_same_record``), bitwise equal weights at the last step,
    and the same tested weights."""
    twin_dir, twin = reference
    assert_same_record(record, output_dir, twin, twin_dir)
    assert checkpoint(output_dir / "checkpoints" / "last.ckpt")["global_step"] == 8
    assert same_weights(
        output_dir / "checkpoints" / "last.ckpt", twin_dir / "checkpoints/last.ckpt"
    )
    assert same_weights(Path(record["checkpoint"]), Path(twin["checkpoint"]))


SLURM_JOB = "4242"
# a batch job as Lightning detects it (it then restores an hpc_ckpt_N.ckpt it finds: issue 42)
SLURM = {"SLURM_JOB_ID": SLURM_JOB, "SLURM_NTASKS": "1", "SLURM_JOB_NAME": "pelab"}


def fake_slurm_job(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The environment of a SLURM job (``SLURM``) whose ``scontrol`` appends its arguments to a
    log, and that log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "scontrol.log"
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    (bin_dir / "scontrol").chmod(0o755)
    return {**SLURM, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}, calls


def uninterrupted(tmp_path: Path, *overrides: str) -> tuple[Path, dict]:
    """The uninterrupted twin (``RESUMABLE`` with ``overrides``): its directory and record."""
    from pelab.train import train

    [record] = train(config(tmp_path, tmp_path / "run", *overrides))
    return tmp_path / "run", record


def sweep_command(repo_root: Path, tmp_path: Path, sweep_dir: Path, *overrides: str) -> list[str]:
    """``scripts/train.py -m`` with ``RESUMABLE`` into ``sweep_dir`` (what follows ``python``)."""
    return [
        "scripts/train.py",
        "-m",
        *RESUMABLE,
        *overrides,
        f"hydra.sweep.dir={sweep_dir}",
        f"paths.cache_dir={tmp_path / 'cache'}",
    ]


def sweep_cli(
    repo_root: Path, tmp_path: Path, sweep_dir: Path, *overrides: str, env=None, cwd=None
) -> subprocess.CompletedProcess:
    """``sweep_command`` run to its end (at most 10 minutes) from the repository (or ``cwd``),
    forked from the tests' pre-imported Python (``tests.zygote``); output captured as text."""
    cmd = sweep_command(repo_root, tmp_path, sweep_dir, *overrides)
    if cwd is not None:
        cmd[0] = str(repo_root / cmd[0])
    env = {**os.environ, **SWEEP_ENV, **(env or {})}
    return zygote.run(cmd, cwd=cwd or repo_root, env=env, timeout=600)


def killed_in_the_test(output_dir: Path) -> None:
    """The record a run killed outright during its final test leaves: ``running``."""
    record = json.loads((output_dir / RESULTS).read_text())
    record["status"] = "running"
    (output_dir / RESULTS).write_text(json.dumps(record))
