"""Whether a checkpoint may be resumed from, and writing one safely: checkpoints are read with
``torch.load(weights_only=True)`` (tensors and plain containers only, never arbitrary code) and
carry the settings that shaped their training, so one from another config is refused with the
keys that differ. Which checkpoint a job starts from is ``pelab.reliability.resume.start``'s."""

from __future__ import annotations

import inspect
import os
import pickle
import zipfile
import zlib
from pathlib import Path
from typing import Any

import torch
from hydra.utils import get_class
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from omegaconf import DictConfig, OmegaConf
from torch import nn

from pelab.config_files import added_defaults
from pelab.errors import ConfigError, causes

# The settings that determine a run's training trajectory: a checkpoint may only resume a run
# whose values agree on every one of them (devices, loggers, paths and evaluation may change).
TRAJECTORY_KEYS = (
    "model",
    "pe",
    "task.train_lengths",
    "task.num_symbols",
    "task._target_",
    "positions",
    "data.batch_size",
    "seed",
    "trainer.max_steps",
    "trainer.accumulate_grad_batches",
    "trainer.gradient_clip_val",
)
IDENTITY_KEY = "pelab"  # checkpoint["callbacks"]["pelab"]: the run's identity and RNG state
# checkpoint["pelab_engine"]: written by the stacked engine (every run a stack of K >= 1 members,
# ``pelab.lit_module``), whose weights carry the member dimension; older ones cannot resume
ENGINE_KEY, ENGINE = "pelab_engine", 2
MEMBERS_KEY = "pelab_members"  # the members' own state (stopped, history, decay_from)
SCORES_KEY = "pelab_scores"  # the last validation's scores (one per member)


def identity(cfg: DictConfig) -> dict[str, Any]:
    """The run's value of every ``TRAJECTORY_KEYS`` entry (``None`` where unset)."""
    values = {}
    for key in TRAJECTORY_KEYS:
        value = OmegaConf.select(cfg, key, default=None)
        values[key] = (
            OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
        )
    return values


def differences(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``key: checkpoint <a> != this run <b>`` for every differing leaf of two identities; an
    option the checkpoint predates (``predates``, ``config_files.added_defaults``) at its default
    is no difference."""
    out: list[str] = []

    added = added_defaults()

    def walk(prefix: str, a: Any, b: Any) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b), key=str):
                dotted = f"{prefix}.{k}" if prefix else str(k)
                at_default = k not in a and dotted in added and b.get(k) == added[dotted]
                if not at_default and not predates(a, b, k):
                    walk(dotted, a.get(k), b.get(k))
        elif a != b:
            out.append(f"{prefix}: checkpoint {a!r} != this run {b!r}")

    walk("", saved, current)
    return out


def predates(saved: dict[str, Any], current: dict[str, Any], key: str) -> bool:
    """Whether ``key`` is an option of ``current``'s class (``_target_``, or the class its
    options are, ``configured_by``: a network's ``NetDims``) that a checkpoint saved before
    pelab had it lacks, with this run at the option's default: it then changes nothing (e.g.
    ``pe.keep_frequencies: 1.0`` resuming a RoPE run saved before p-RoPE)."""
    target = current.get("_target_")
    if key in saved or key not in current or not isinstance(target, str):
        return False
    try:
        cls = get_class(target)
        options = getattr(cls, "configured_by", cls)
        parameter = inspect.signature(options).parameters.get(key)
    except (ImportError, ValueError, TypeError, AttributeError):
        return False
    return parameter is not None and parameter.default == current[key]


def check_integrity(path: Path) -> None:
    """A ``ConfigError`` when a member of the checkpoint's zip archive (``torch.save``'s format)
    fails its CRC: overwritten bytes or one flipped bit, which ``torch.load`` does not check and
    would load as wrong weights. A file that is no zip archive is left to ``torch.load``."""
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError):
        return
    except (zlib.error, NotImplementedError, ValueError) as error:
        bad = f"({type(error).__name__}: {error})"
    if bad is not None:
        raise ConfigError(
            f"ckpt_path={path} is corrupt: its member {bad} fails its CRC check (overwritten or "
            "flipped bytes), so its weights cannot be trusted. Delete it to resume from an older "
            "checkpoint of the run (or to start over), or pass another with ckpt_path=<file>"
        )


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The checkpoint at ``path``, loaded with ``weights_only=True`` after its CRCs are checked
    (``check_integrity``); a ``ConfigError`` saying what is wrong for a missing, truncated,
    corrupt or foreign file (one that needs arbitrary code to
    load is refused, never executed)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"ckpt_path={path} does not exist or is not a file")
    check_integrity(path)
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as error:
        raise ConfigError(
            f"ckpt_path={path} is not a readable checkpoint (corrupt, truncated, or it holds "
            f"objects that only a full unpickle could load, which pelab refuses): "
            f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        ) from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ConfigError(f"ckpt_path={path} is not a Lightning checkpoint (no 'state_dict')")
    return checkpoint


def check_compatible(checkpoint: dict[str, Any], cfg: DictConfig, model: nn.Module, path) -> None:
    """A ``ConfigError`` naming what differs when ``checkpoint`` was trained with other settings
    than ``cfg`` or holds weights of another shape than ``model``'s."""
    saved = (checkpoint.get("callbacks", {}).get(IDENTITY_KEY) or {}).get("identity")
    if saved is not None:
        changed = differences(saved, identity(cfg))
        if changed:
            raise ConfigError(
                f"ckpt_path={path} comes from a run with other settings; it can only resume the "
                f"same run (use another output directory, or set resume=false to start over):\n  "
                + "\n  ".join(changed)
            )
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    found = {k: tuple(v.shape) for k, v in checkpoint["state_dict"].items()}
    unstacked = [k for k in expected.keys() & found.keys() if (1, *found[k]) == expected[k]]
    if ENGINE_KEY not in checkpoint and unstacked:
        raise ConfigError(
            f"ckpt_path={path} was written before pelab trained every run as a stack of members "
            "(2026-11-25) and cannot resume this run: set resume=false (or use another output "
            "directory) to train again; its weights still evaluate (scripts/eval.py, load_run)"
        )
    problems = [
        f"{k}: checkpoint {found[k]} != model {expected[k]}"
        for k in sorted(expected.keys() & found.keys())
        if found[k] != expected[k]
    ]
    problems += [f"missing {k}" for k in sorted(expected.keys() - found.keys())]
    problems += [f"unexpected {k}" for k in sorted(found.keys() - expected.keys())]
    if problems:
        raise ConfigError(
            f"the weights in ckpt_path={path} do not fit the model of this config:\n  "
            + "\n  ".join(problems[:10])
            + (f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else "")
        )


class AtomicCheckpointIO(TorchCheckpointIO):
    """Writes each checkpoint to a temporary file beside it, then renames it into place: a kill
    during a save leaves the previous checkpoint, never a truncated one. The temporary file of
    a process killed mid-save (``.<name>.<pid>.tmp``, never read) is removed at the next save."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(path)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except (OSError, RuntimeError) as error:  # torch wraps a failed write in RuntimeError
            fault = next((e for e in causes(error) if isinstance(e, OSError)), None)
            if fault is None:
                raise
            message = f"{fault.strerror}; the previous checkpoint is intact"
            raise OSError(fault.errno, message, str(path)) from error
        finally:
            tmp.unlink(missing_ok=True)


def _remove_stale(path: Path) -> None:
    """Remove the temporary files of saves to ``path`` by processes that no longer run."""
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        pid = tmp.name[len(path.name) + 2 : -len(".tmp")]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            tmp.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (another user's counts: signalling it is refused)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True
