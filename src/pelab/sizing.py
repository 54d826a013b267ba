"""A job built and sized once, above the assembly and the run-safety checks it combines.

- ``built``: a job's task and its members' stacked model, from its config: what training, the
  checked sweeper (which refuses a bad job before a sweep starts), the SLURM launcher's sizing
  and the parallel launcher's GPU probe each build, one way.
- ``trained_parameters``: the parameters a job trains (its stacked network), which size its
  threads (``pelab.threads``) and a SLURM job's CPUs (``pelab.reliability.cluster.slurm``).
- ``job_need``: the bytes one job of a parallel sweep holds at its peak, training included,
  which ``hydra/launcher=parallel`` divides a GPU's free memory by (the measures themselves:
  ``pelab.reliability.checks.memory``).
"""

from __future__ import annotations

from omegaconf import DictConfig

from pelab.assembly import build_members, build_task
from pelab.lit_module import SequenceModel
from pelab.members import Job
from pelab.reliability.checks import memory, peak_memory
from pelab.tasks.base import Task


def built(job: Job, members: int | None = None) -> tuple[Task, SequenceModel]:
    """The job's task and its model: its members (the first ``members`` of them) stacked,
    initialised as their single runs."""
    task = build_task(job.config)
    chosen = job.members if members is None else job.members[:members]
    return task, build_members([m.config for m in chosen], task, live=job.live)


def trained_parameters(job: Job, model: SequenceModel) -> int:
    """The parameters the job trains: every member's."""
    return model.net.num_params()["total"] * len(job.members)


def job_need(cfg: DictConfig, device: str) -> int:
    """The bytes a run of ``cfg`` holds at its peak on ``device``, measured with a model built
    for it: its weights twice (with their gradients, or the copy a stack's members' own rates
    step from), and the larger of a training step (``train_step_peak``, times ``MARGIN``) and
    evaluation at the longest length (``measured_need``) beside the optimizer's state."""
    task, model = built(Job.of(cfg))
    model = model.to(device)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    train, state = peak_memory.train_step_peak(cfg, task, model, device)
    evaluate = memory.measured_need(cfg, task, model, device, memory.available_bytes(device))[0]
    return 2 * weights + max(int(memory.MARGIN * train), state + evaluate)
