"""Members (``seeds=[...]``): each member is its seed's single run, trained in one batched step."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import lightning as L
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from pelab.analysis.collect import directory_records, lengths_frame, runs_frame
from pelab.analysis.table import ablation
from pelab.data.datamodule import TrainBatches
from pelab.errors import ConfigError
from pelab.members import (
    build_stack,
    check_learning_rates,
    check_seeds,
    member_configs,
    member_data,
    padded_teacher_forcing,
)
from pelab.model_kinds import DecoderKind
from pelab.pe.base import PE_REGISTRY
from pelab.train import build_model, build_task, run
from tests.conftest import TINY, compose_config
from tests.reliability.runs import checkpoint, fault, same_weights

STACK = [
    *TINY,
    "logger=csv",
    "task.train_lengths=[1,8]",
    "task.eval_lengths=[4,8,12]",
    "members_step=batched",  # the vmapped step (auto steps the members one by one on the CPU)
]


def stack_config(tmp_path: Path, *overrides: str):
    return compose_config([*STACK, "seeds=[0,3]", *overrides], tmp_path)


def single(cfg, seed: int):
    """What the single run of ``seed`` builds: seeded, then the task and the model."""
    L.seed_everything(seed, workers=True)
    return build_model(cfg, build_task(cfg))


@pytest.mark.parametrize("seeds", ["[]", "[0,0]", "[0,x]", "3"])
def test_seeds_must_be_a_list_of_distinct_ints(seeds):
    with pytest.raises(ConfigError, match="seeds="):
        check_seeds(OmegaConf.create({"s": OmegaConf.create(f"v: {seeds}").v}).s)


@pytest.mark.parametrize("rates", ["[]", "[0.001,0.001]", "[0.001,0]", "[x]", "0.1"])
def test_learning_rates_must_be_a_list_of_distinct_positive_numbers(rates):
    with pytest.raises(ConfigError, match="learning_rates="):
        check_learning_rates(OmegaConf.create({"s": OmegaConf.create(f"v: {rates}").v}).s)


def test_members_over_seeds_and_learning_rates_are_each_a_single_run(tmp_path):
    cfg = stack_config(tmp_path, "learning_rates=[1e-3,3e-3]")
    members = member_configs(cfg)
    assert [(m.seed, m.model.optimizer.lr) for m in members] == [
        (0, 1e-3),
        (3, 1e-3),
        (0, 3e-3),
        (3, 3e-3),
    ]
    assert all(m.seeds is None and m.learning_rates is None for m in members)
    out = Path(cfg.paths.output_dir)
    assert [Path(m.paths.output_dir) for m in members] == [
        out / "lr_0.001_seed_0",
        out / "lr_0.001_seed_3",
        out / "lr_0.003_seed_0",
        out / "lr_0.003_seed_3",
    ]
    assert len(member_configs(compose_config([*STACK, "learning_rates=[0.01]"], tmp_path))) == 1


def test_each_member_config_is_its_single_run_in_its_own_directory(tmp_path):
    cfg = stack_config(tmp_path)
    members = member_configs(cfg)
    assert [(m.seed, m.seeds) for m in members] == [(0, None), (3, None)]
    assert [Path(m.paths.output_dir) for m in members] == [
        Path(cfg.paths.output_dir) / "seed_0",
        Path(cfg.paths.output_dir) / "seed_3",
    ]


def test_a_member_starts_as_its_single_run(tmp_path):
    """Initial weights equal bitwise; the first step's loss and gradients match the single
    run's (the members' batches differ in length, so the padded step is exercised)."""
    cfg = stack_config(tmp_path)
    configs = member_configs(cfg)
    stack = build_stack(cfg, configs)
    assert stack.mode == "padded"
    items = []
    for member, c in zip(stack.members, configs, strict=True):
        alone = single(c, c.seed)
        assert all(
            torch.equal(a, b)
            for a, b in zip(member.state_dict().values(), alone.state_dict().values(), strict=True)
        )
        prompt, answer = TrainBatches(
            alone.task, cfg.data.batch_size, 4, c.seed, cfg.data.length_sampling
        )[0]
        positions = alone.training_positions(prompt, answer.shape[1], 0)
        items.append((prompt, answer, positions, alone))
    assert items[0][0].shape != items[1][0].shape  # different lengths: padding is used
    losses = stack.member_losses([0, 1], [item[:3] for item in items])
    torch.stack(losses).sum().backward()
    for member, loss, (prompt, answer, positions, alone) in zip(
        stack.members, losses, items, strict=True
    ):
        expected = alone.loss(prompt, answer, positions)
        expected.backward()
        torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
        for (name, p), q in zip(member.named_parameters(), alone.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize(("step", "mode"), [("auto", "sequential"), ("sequential", "sequential")])
def test_on_the_cpu_members_step_one_after_another_unless_batched(tmp_path, step, mode):
    cfg = stack_config(tmp_path, f"members_step={step}")
    assert build_stack(cfg, member_configs(cfg)).mode == mode


def test_an_unknown_members_step_is_a_clear_error(tmp_path):
    cfg = stack_config(tmp_path, "members_step=vectorised")
    with pytest.raises(ConfigError, match="members_step='vectorised'; valid choices: auto"):
        build_stack(cfg, member_configs(cfg))


def test_padding_keeps_the_answer_targets_and_counts_positions_on():
    prompt, answer = torch.tensor([[5, 6]]), torch.tensor([[6, 5]])
    positions = torch.arange(6)[None]  # BOS p p SEP a a
    inputs, targets, padded = padded_teacher_forcing(DecoderKind, prompt, answer, positions, 8)
    assert inputs.shape == targets.shape == padded.shape == (1, 8)
    assert targets[0].tolist() == [-100, -100, -100, 6, 5, -100, -100, -100]
    assert padded[0].tolist() == list(range(8))


@pytest.mark.parametrize("model", ["decoder", "encoder"])
@pytest.mark.parametrize("pe", sorted(PE_REGISTRY))
def test_every_encoding_runs_batched_or_falls_back_with_a_reason(tmp_path, pe, model, caplog):
    """The contract: a batched step gives each member its single run's loss; an encoding that
    vmap cannot run trains its members sequentially, and the log says why."""
    check_batched_losses(tmp_path, pe, model, caplog)


@pytest.mark.parametrize("pe", ["sinusoidal", "rope", "t5_bias", "rope_2d"])
def test_the_bare_encoder_runs_batched_with_each_members_single_loss(tmp_path, pe, caplog):
    """``model=encoder_bare`` (the Chomsky presets' stacks): 1-D positions and a task's 2-D
    coordinates (``rope_2d`` on the grid) slice alike in the batched and the single step."""
    check_batched_losses(tmp_path, pe, "encoder_bare", caplog)


def check_batched_losses(tmp_path, pe, model, caplog):
    # 2-D encodings need a grid; those that index digits (abacus) a task with numbers
    task = "grid" if pe.endswith("_2d") else "copy"
    task = "addition" if PE_REGISTRY[pe].needs_digit_tokens else task
    cfg = stack_config(tmp_path, f"pe={pe}", f"task={task}", f"model={model}")
    configs = member_configs(cfg)
    try:
        with caplog.at_level(logging.WARNING, logger="pelab.members"):
            stack = build_stack(cfg, configs)
    except ConfigError as error:  # an encoding defined for causal models only
        assert model == "encoder" and "causal" in str(error)
        return
    if stack.mode == "sequential":
        assert "cannot run under torch.func.vmap" in caplog.text
    else:
        # right padding needs a decoder whose outputs a cache could compute (FoX's gates: grouped)
        padded = model == "decoder" and PE_REGISTRY[pe].supports_kv_cache
        assert stack.mode == ("padded" if padded else "grouped")
    # what a member draws in training (dropout, abacus's offset) comes from its own stream, not
    # its single run's (pelab.members): the losses are compared on the function itself, and the
    # probe above already ran a training step of the mode
    stack.eval()
    items = []
    for member, c in zip(stack.members, configs, strict=True):
        prompt, answer = TrainBatches(
            member.task, cfg.data.batch_size, 4, c.seed, cfg.data.length_sampling
        )[1]
        items.append((prompt, answer, member.training_positions(prompt, answer.shape[1], 1)))
    losses = stack.member_losses([0, 1], items)
    for member, loss, item in zip(stack.members, losses, items, strict=True):
        torch.testing.assert_close(loss, member.loss(*item), rtol=1e-5, atol=1e-6)


def test_a_stopped_member_no_longer_changes(tmp_path):
    cfg = stack_config(tmp_path, "trainer.max_steps=3", "trainer.val_check_interval=3")
    stack = build_stack(cfg, member_configs(cfg))
    stack.stopped[0] = True
    before = [{k: v.clone() for k, v in m.state_dict().items()} for m in stack.members]
    trainer = L.Trainer(
        max_steps=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        gradient_clip_val=1.0,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    trainer.fit(stack, datamodule=member_data(cfg, stack))
    after = [m.state_dict() for m in stack.members]
    assert all(torch.equal(before[0][k], after[0][k]) for k in before[0])
    assert not all(torch.equal(before[1][k], after[1][k]) for k in before[1])


@pytest.fixture(scope="module")
def stacked_run(tmp_path_factory):
    """``seeds=[0,3]`` trained as one stack (4 steps, validations at 2 and 4)."""
    tmp = tmp_path_factory.mktemp("stack")
    cfg = stack_config(tmp)
    return tmp, cfg, run(cfg)


def test_a_stack_writes_one_single_run_record_per_member(stacked_run, tmp_path):
    tmp, cfg, records = stacked_run
    assert [r["choices"]["seed"] for r in records] == [0, 3]
    out = Path(cfg.paths.output_dir)
    for record, seed in zip(records, (0, 3), strict=True):
        assert record["status"] == "completed" and record["config"]["seed"] == seed
        assert record["member_of"]["seeds"] == [0, 3] and record["member_of"]["dir"] == str(out)
        assert record["member_of"]["fit_time_s"] > 0
        assert (out / f"seed_{seed}" / "results.json").is_file()
        assert (out / f"seed_{seed}" / "checkpoints" / "best.ckpt").is_file()
    assert checkpoint(out / "checkpoints" / "last.ckpt")["global_step"] == 4
    # each member's loggers get its own training history (a loss at step 0, two validations)
    logged = pd.read_csv(next((out / "seed_3" / "csv").glob("*/metrics.csv")))
    assert logged["train/loss"].notna().sum() == 1
    assert logged.dropna(subset=["val/id/exact_match"])["step"].tolist() == [2, 4]
    # the member of seed 3 is the single run of seed 3
    alone = run(compose_config([*STACK, "seed=3"], tmp_path))
    assert records[1]["metrics"]["test"] == alone["metrics"]["test"]
    mine = checkpoint(out / "seed_3" / "checkpoints" / "best.ckpt")["state_dict"]
    theirs = checkpoint(Path(alone["config"]["paths"]["output_dir"]) / "checkpoints/best.ckpt")
    for name, value in mine.items():
        torch.testing.assert_close(value, theirs["state_dict"][name], rtol=1e-4, atol=1e-5)


def test_members_are_tabulated_as_the_runs_of_their_seeds(stacked_run):
    tmp, cfg, _ = stacked_run
    job = Path(cfg.paths.output_dir)
    (job / ".hydra").mkdir(exist_ok=True)
    OmegaConf.save(OmegaConf.create(["pe=rope", "seeds=[0,3]"]), job / ".hydra/overrides.yaml")
    records = directory_records(tmp)
    assert sorted(r["choices"]["seed"] for r in records) == [0, 3]  # the stack is no crashed job
    assert {r["job"] for r in records} == {str(job)}
    runs = runs_frame(records)
    assert "seeds" not in runs.columns  # seeds is no setting that splits the table
    table = ablation(runs, lengths_frame(records))
    assert table.rows == ["pe"] and set(table.by_task["n"]) == {2}  # one cell of both seeds


def test_a_killed_stack_resumes_exactly(stacked_run, tmp_path):
    _, cfg, reference = stacked_run
    broken = stack_config(tmp_path, *fault("raise", 3))
    with pytest.raises(RuntimeError, match="injected fault at step 3"):
        run(broken)
    out = Path(broken.paths.output_dir)
    assert [checkpoint(out / "checkpoints/last.ckpt")["global_step"]] == [2]
    for seed in (0, 3):
        failed = json.loads((out / f"seed_{seed}" / "results.json").read_text())
        assert failed["status"] == "failed" and "injected fault" in failed["error"]
    records = run(stack_config(tmp_path))  # the same command again: resumes the stack
    assert all(r["resumed_from"] == str(out / "checkpoints/last.ckpt") for r in records)
    assert [r["metrics"] for r in records] == [r["metrics"] for r in reference]


def test_a_stack_with_dropout_and_randomized_positions_resumes_and_repeats_exactly(tmp_path):
    """Dropout draws each member's own masks from the checkpointed RNG; randomized positions
    come from ``(seed, step)``: a killed and resumed stack equals an uninterrupted one, which
    equals a second uninterrupted one."""
    noisy = ["model.net.dropout=0.1", "positions=randomized", "positions.max_position=64"]
    runs = []
    for name, faults in (("a", []), ("b", []), ("killed", fault("raise", 3))):
        cfg = stack_config(tmp_path / name, *noisy, *faults)
        if faults:
            with pytest.raises(RuntimeError, match="injected fault"):
                run(cfg)
            cfg = stack_config(tmp_path / name, *noisy)
        runs.append(run(cfg))
    assert runs[2][0]["resumed_from"].endswith("last.ckpt")
    assert [r["metrics"] for r in runs[0]] == [r["metrics"] for r in runs[1]]
    assert [r["metrics"] for r in runs[0]] == [r["metrics"] for r in runs[2]]
    weights = [
        checkpoint(tmp_path / name / "run" / "checkpoints" / "last.ckpt")["state_dict"]
        for name in ("a", "b", "killed")
    ]
    for other in weights[1:]:
        assert all(torch.equal(weights[0][k], other[k]) for k in weights[0])


def test_a_member_of_a_learning_rate_is_bitwise_its_single_run_and_a_row_of_the_table(tmp_path):
    """``learning_rates=[...]``: each member optimises at its own learning rate (a parameter
    group of its own) and is exactly the single run with that ``model.optimizer.lr``."""
    cfg = compose_config(
        [*STACK, "members_step=sequential", "learning_rates=[1e-3,2e-2]"], tmp_path
    )
    stack = run(cfg)
    assert [r["member_of"]["learning_rates"] for r in stack] == [[1e-3, 2e-2]] * 2
    alone = run(compose_config([*STACK, "model.optimizer.lr=2e-2"], tmp_path / "alone"))
    assert stack[1]["metrics"] == alone["metrics"]
    theirs = tmp_path / "alone" / "run" / "checkpoints" / "best.ckpt"
    for lr, same in (("0.02", True), ("0.001", False)):
        mine = Path(cfg.paths.output_dir) / f"lr_{lr}_seed_0" / "checkpoints" / "best.ckpt"
        assert same_weights(mine, theirs) == same
    runs = runs_frame(directory_records(Path(cfg.paths.output_dir)))
    assert sorted(runs["model.optimizer.lr"]) == ["0.001", "0.02"]


def test_a_sequential_member_is_bitwise_its_single_run(tmp_path):
    """``members_step=sequential`` (the CPU's default): the member's weights after training are
    exactly the single run's."""
    stack = run(stack_config(tmp_path / "stack", "members_step=sequential"))
    alone = run(compose_config([*STACK, "seed=3"], tmp_path / "alone"))
    assert stack[1]["metrics"] == alone["metrics"]
    mine = tmp_path / "stack" / "run" / "seed_3" / "checkpoints" / "best.ckpt"
    theirs = tmp_path / "alone" / "run" / "checkpoints" / "best.ckpt"
    assert same_weights(mine, theirs)
