"""Assembly: a run's task, model and data from its Hydra config, every setting checked first.
Training (``pelab.train``), re-evaluation (``pelab.evaluate``), ``pelab.load_run`` and the
encoding inspector build what they run here."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import lightning as L
import torch
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from pelab import pe as _pe  # noqa: F401  (registers the encodings)
from pelab import tasks as _tasks  # noqa: F401  (registers the tasks)
from pelab.competence import check_budget, validation_lengths
from pelab.config_files import schedule_options
from pelab.data.datamodule import TaskData
from pelab.errors import ConfigError, check_choices
from pelab.lit_module import SequenceModel
from pelab.model_kinds import get_model_kind
from pelab.models.dims import NetDims
from pelab.models.encoder_decoder import EncoderDecoder
from pelab.models.stacked import stack_members
from pelab.models.transformer import Transformer
from pelab.pe.base import ModelDims, PositionalEncoding
from pelab.pe.layered import scheduled
from pelab.positions import build_sampler
from pelab.reliability.checks.validate import check_types
from pelab.reliability.cluster.slurm import GPU_ACCELERATORS
from pelab.tasks import TASK_REGISTRY
from pelab.tasks.base import Task
from pelab.threads import check_threads


def build_task(cfg: DictConfig) -> Task:
    return instantiate(cfg.task, _partial_=True)()  # called outside Hydra: errors unwrapped


def build_model(cfg: DictConfig, task: Task, sizes: dict[str, int] | None = None) -> SequenceModel:
    """The LightningModule of one member, ``cfg``'s seed (validates every shape and length before
    training).

    ``sizes``: the ``max_len`` and ``train_max_len`` the model is built with (re-evaluation
    passes those of the training run, from its ``model_dims``); default: this run's longest
    sequence (and the sampler's largest position) and its longest training sequence.
    """
    return build_members([cfg], task, sizes, live=True)


def build_members(
    configs: Sequence[DictConfig],
    task: Task,
    sizes: dict[str, int] | None = None,
    live: bool = False,
) -> SequenceModel:
    """The LightningModule of the members ``configs`` (``pelab.members.member_configs``; one
    config: a plain run): each member's network initialised as its single run's (seeded with
    its ``seed``, then built), stacked into one (``pelab.models.stacked.stack_members``).
    ``live``: it logs to its loggers as it trains (``pelab.members.Job.live``)."""
    cfg = configs[0]
    kind = get_model_kind(cfg.model.kind)
    positions = build_sampler(instantiate(cfg.positions), task, cfg.model.net.n_layers)
    sizes = sizes or {
        "max_len": max(task.max_sequence_length(), positions.max_position),
        "train_max_len": task.max_train_sequence_length(),
    }
    check_digit_tokens(cfg, task)
    network: type[Transformer | EncoderDecoder] = get_class(cfg.model.net._target_)
    net = net_dims(cfg, task, sizes)

    def member(seed: int) -> Transformer | EncoderDecoder:
        L.seed_everything(seed, workers=True, verbose=False)  # as its single run is seeded
        return network(
            net,
            pe=build_encoding(cfg),
            layered_positions=positions.layered,
            **kind.net_options,  # the model kind's structure, e.g. causal or not
        )

    rates = [c.model.optimizer.get("lr") for c in configs]
    return SequenceModel(
        stack_members([member(c.seed) for c in configs]),
        kind,
        task,
        optimizer=instantiate(cfg.model.optimizer),
        positions=positions,
        compile=cfg.model.get("compile", False),
        val_lengths=validation_lengths(task, cfg.get("learned_at")),
        seeds=[c.seed for c in configs],
        learning_rates=None if len(set(rates)) == 1 else rates,
        live=live,
        **cfg.model.schedule,
    )


def net_dims(cfg: DictConfig, task: Task, sizes: dict[str, int]) -> NetDims:
    """The network's ``NetDims``: ``model.net``'s options (its flat keys, as records keep them),
    the task's vocabulary, position coordinates and digits, and the lengths ``sizes``."""
    options = OmegaConf.to_container(cfg.model.net, resolve=True)
    return NetDims(
        **{k: v for k, v in options.items() if not k.startswith("_")},
        vocab_size=task.vocab_size,
        max_len=sizes["max_len"],
        train_max_len=sizes["train_max_len"],
        position_dims=task.position_dims,
        digit_tokens=task.digit_tokens,
    )


def build_encoding(cfg: DictConfig) -> Callable[[ModelDims], PositionalEncoding]:
    """The run's encoding factory: ``pe=``'s constructor with its options, scheduled by layer
    (``pe.layers``, ``pelab.pe.layered.scheduled``; a record written before schedules has
    none)."""
    options = OmegaConf.to_container(cfg.pe, resolve=True)
    schedule = {k: v for k in schedule_options() if (v := options.pop(k, None)) is not None}
    return scheduled(instantiate(options), **schedule)


def check_digit_tokens(cfg: DictConfig, task: Task) -> None:
    """A ``ConfigError`` when the encoding indexes the digits of numbers (``pe=abacus``) and the
    task declares no digit tokens (``Task.digit_tokens``), naming the tasks that declare them."""
    encoding = get_class(cfg.pe._target_)
    if encoding.needs_digit_tokens and not task.digit_tokens:
        having = sorted(name for name, cls in TASK_REGISTRY.items() if cls.digit_tokens)
        raise ConfigError(
            f"pe={encoding.pe_name} indexes the digits within each number, but "
            f"task={task.task_name} declares no digit tokens (Task.digit_tokens) with these "
            f"settings; tasks that declare them (some only in some settings, see docs/tasks.md): "
            f"{', '.join(having)}"
        )


def data_module(cfg: DictConfig, task: Task, seeds: Sequence[int] | None = None) -> TaskData:
    """Training batches of ``seeds`` (default: ``cfg.seed``) and the cached evaluation sets of
    ``task`` (training and re-evaluation read the same sets)."""
    return TaskData(
        task,
        batch_size=cfg.data.batch_size,
        num_batches=cfg.trainer.max_steps,
        seeds=[cfg.seed] if seeds is None else list(seeds),
        eval_batch_size=cfg.data.eval_batch_size,
        cache_dir=cfg.paths.cache_dir,
        val_lengths=validation_lengths(task, cfg.get("learned_at")),
        length_sampling=cfg.data.get("length_sampling", "uniform"),
        num_workers=cfg.data.get("num_workers", 0),
        curriculum_steps=cfg.data.get("curriculum_steps", 0),
    )


def check_training(cfg: DictConfig) -> None:
    """A ``ConfigError`` for a setting no training run can use (types, the data's choices,
    the budget)."""
    check_types(cfg)
    check_choices(TaskData.__init__, "data", cfg.get("data") or {})  # no _target_ to check by
    check_threads(cfg.get("threads", "auto"))
    if cfg.trainer.max_steps < 1:
        raise ConfigError(
            f"trainer.max_steps must be >= 1, got {cfg.trainer.max_steps}: pelab trains by steps, "
            "with a fresh batch every step (epochs have no meaning here)"
        )
    curriculum = cfg.data.get("curriculum_steps", 0)
    if curriculum > cfg.trainer.max_steps:
        raise ConfigError(
            f"data.curriculum_steps={curriculum} exceeds trainer.max_steps="
            f"{cfg.trainer.max_steps}: training would end before the curriculum reaches the "
            "longest training length; set it to at most the training steps (0: no curriculum)"
        )
    check_budget(cfg.get("learned_at"), cfg.get("learned_patience", 2))
    check_devices(cfg.trainer)


def check_gpu_present(trainer: DictConfig) -> None:
    """A ``ConfigError`` when ``trainer.accelerator`` asks a GPU (``trainer=gpu``) and this
    machine has none, before a run directory or record exists (Lightning's own error comes
    after both, naming ``full_key: trainer``). Checked where the job runs, not where a sweep is
    launched (a cluster's login node has no GPU)."""
    accelerator = str(trainer.get("accelerator", "cpu"))
    if accelerator in GPU_ACCELERATORS and not torch.cuda.is_available():
        raise ConfigError(
            f"trainer.accelerator={accelerator} (trainer=gpu) but this machine has no CUDA GPU "
            "(torch.cuda.is_available() is False): train on the CPU with trainer=default, or "
            "run where a GPU is (hydra/launcher=slurm)"
        )


def check_devices(trainer: DictConfig) -> None:
    """A ``ConfigError`` for ``trainer.devices`` naming more than one device: a job trains on
    one device (its members stacked on it), and pelab scales out by jobs, not by DDP (the engine
    is not DDP-aware). ``1``, ``[i]``, ``"i,"`` and, on the CPU, ``auto`` are one device."""
    devices = trainer.get("devices", 1)
    accelerator = str(trainer.get("accelerator", "cpu"))
    listed = [d for d in str(devices).strip("[]").split(",") if d.strip()]
    if isinstance(devices, int) or str(devices).isdigit():
        one = int(devices) == 1
    elif devices == "auto":
        one = accelerator == "cpu"
    else:
        one = len(listed) == 1 and listed[0].strip() != "-1"
    if not one:
        raise ConfigError(
            f"trainer.devices={devices}: a pelab job trains on one device; it scales by jobs, "
            "not DDP. Use trainer.devices=1 (or [i] for GPU i) and run a sweep: "
            "hydra/launcher=parallel places one job per GPU of the node (several where memory "
            "allows), hydra/launcher=slurm one per allocation; seeds=[...] stacks members on one "
            "device"
        )
