"""The runs of a W&B project (``wandb:<entity>/<project>``) as the records their
``results.json`` would hold (online; it needs ``wandb login`` and a network)."""

from __future__ import annotations

from typing import Any

from pelab.analysis.frames import task_config
from pelab.errors import ConfigError
from pelab.record import COMPETENCE_KEYS

# W&B run states -> pelab statuses (a run's own ``status`` summary key wins when present)
WANDB_STATES = {"finished": "completed", "failed": "failed", "crashed": "crashed"}


def wandb_records(
    path: str, filters: dict[str, str] | None = None, job_type: str = "train"
) -> list[dict[str, Any]]:
    """The runs of W&B job type ``job_type`` of the W&B project ``path``
    (``entity/project``), as records."""
    import wandb

    try:
        runs = wandb.Api().runs(path, filters=filters or None)
        return [wandb_record(run) for run in runs if run.job_type == job_type]
    except (wandb.errors.CommError, wandb.errors.UsageError, ValueError) as error:
        raise ConfigError(
            f"cannot read the W&B project {path!r} ({error}); it needs `wandb login` and a "
            "network. Runs logged offline: pass their sweep directory instead"
        ) from None


def wandb_record(run: Any) -> dict[str, Any]:
    """A W&B run (``wandb.Api`` object) as the record its ``results.json`` would hold: the
    ``metrics`` section and the training lengths come as data from the run's summary
    (``pelab.wandb_finish.finish_wandb``). Under a W&B sweep agent the swept keys are locked to the
    sweep's values (``task: copy``, not the resolved task config), so the config's groups may be
    plain strings: the choices come from ``config.choices``, which no sweep locks."""
    summary = {k: v for k, v in dict(run.summary).items() if not k.startswith("_")}
    config = dict(run.config)
    status = summary.get("status") or WANDB_STATES.get(run.state, run.state)
    return {
        "status": status,
        "error": summary.get("error")
        or (f"W&B state: {run.state}" if status != "completed" else ""),
        "choices": config.get("choices") or {},
        "metrics": dict(summary.get("metrics") or {}) if status == "completed" else {},
        **{key: summary[key] for key in COMPETENCE_KEYS if key in summary},
        "train_lengths": summary.get("train_lengths")
        or task_config({"config": config}).get("train_lengths"),
        "config": config,
        "overrides": summary.get("overrides") or [],
        **({"member_of": summary["member_of"]} if summary.get("member_of") else {}),
        "source": run.url,
    }
