"""Members (``seeds=[...]``): each member is its seed's single run, trained in one stacked network
(``pelab.models.stacked``) through the one training path (``pelab.train``)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from pelab.analysis.collect import directory_records
from pelab.analysis.frames import lengths_frame, runs_frame
from pelab.analysis.table import ablation
from pelab.assembly import build_members, build_model, build_task, data_module
from pelab.data.datamodule import TrainBatches
from pelab.errors import ConfigError
from pelab.member_log import DECAY_KEY, MemberLog
from pelab.member_state import MemberState, restore_members, save_members
from pelab.members import Job, check_learning_rates, check_seeds, member_configs
from pelab.models.member_encodings import MemberEncodings
from pelab.models.stacked import member_weights
from pelab.pe.base import PE_REGISTRY
from pelab.reliability.resume.callbacks import BestCheckpoints
from pelab.train import train
from pelab.trained import load_weights
from tests.conftest import TINY, compose_config, encoding_task
from tests.reliability.runs import checkpoint, fault

STACK = [
    *TINY,
    "logger=csv",
    "task.train_lengths=[1,8]",
    "task.eval_lengths=[4,8,12]",
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


def test_a_job_is_its_members_and_streams_live_only_as_a_plain_run(tmp_path):
    """``seeds=[3]`` is one member, in its own directory, whose logs are buffered (not live)."""
    plain = Job.of(compose_config(STACK, tmp_path))
    assert plain.live and plain.member_of() is None
    assert [(m.index, m.seed, m.directory) for m in plain.members] == [(0, 0, plain.directory)]
    one = Job.of(stack_config(tmp_path, "seeds=[3]"))
    assert not one.live and one.seeds == [3]
    assert one.members[0].directory == one.directory / "seed_3"
    assert one.member_of() == {"seeds": [3], "learning_rates": None, "dir": str(one.directory)}
    grid = Job.of(stack_config(tmp_path, "seeds=[0,1]", "learning_rates=[0.01,0.001]"))
    assert [(m.index, m.seed, m.learning_rate) for m in grid.members] == [
        (0, 0, 0.01),
        (1, 1, 0.01),
        (2, 0, 0.001),
        (3, 1, 0.001),
    ]
    assert grid.member_of()["learning_rates"] == [0.01, 0.001]
    assert [m.config.model.optimizer.lr for m in grid.members] == [0.01, 0.01, 0.001, 0.001]


def test_the_logging_sink_streams_one_member_live_or_buffers_each():
    logged = {}
    module = SimpleNamespace(log=lambda key, value, **k: logged.__setitem__(key, value))
    live = MemberLog([MemberState(3)], live=True)
    live.training_step(module, 3, {0: torch.tensor(2.0)}, {0: 5}, None)
    assert logged == {"train/loss": torch.tensor(2.0), "train/length": 5.0}
    assert live.members[0].history == []
    buffered = MemberLog([MemberState(3)], live=False)  # seeds=[3]: it replays afterwards
    buffered.training_step(module, 3, {0: torch.tensor(2.0)}, {0: 5}, [0.5])
    assert buffered.members[0].history == [
        (3, {"train/loss": 2.0, "train/length": 5, DECAY_KEY: 0.5})
    ]
    with pytest.raises(ValueError, match="2 members cannot stream"):
        MemberLog([MemberState(0), MemberState(1)], live=True)


def stack_of(cfg):
    """The model of ``cfg``'s members, built as training builds it."""
    return build_members(member_configs(cfg), build_task(cfg))


def test_a_member_starts_as_its_single_run(tmp_path):
    """Initial weights equal bitwise; the first step's loss and gradients match the single
    run's (the members' batches share their length: one stacked call)."""
    cfg = stack_config(tmp_path)
    configs = member_configs(cfg)
    stack = stack_of(cfg)
    batch, alone = [], []
    for k, c in enumerate(configs):
        single_run = single(c, c.seed)
        theirs = single_run.net.state_dict()
        mine = member_weights(stack.net, k)
        assert all(torch.equal(mine[name], theirs[name].squeeze(0)) for name in theirs)
        batch.append(TrainBatches(single_run.task, 8, 4, c.seed, cfg.data.length_sampling)[1])
        alone.append(single_run)
    assert batch[0][0].shape == batch[1][0].shape  # the step's length is shared
    assert not torch.equal(batch[0][0], batch[1][0])  # its samples are each seed's own
    assert stack.shape_groups(batch) == [[0, 1]]
    losses = stack.member_losses(batch, 1)
    torch.stack(list(losses.values())).sum().backward()
    grads = {name: p.grad for name, p in stack.net.named_parameters()}
    for k, single_run in enumerate(alone):
        expected = single_run.member_losses([batch[k]], 1)[0]
        expected.backward()
        torch.testing.assert_close(losses[k], expected, rtol=1e-5, atol=1e-6)
        for name, q in single_run.net.named_parameters():
            torch.testing.assert_close(grads[name][k], q.grad[0], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("pe", ["rope", "t5_bias"])  # t5_bias: a selection runs at once (vmap)
def test_members_of_other_shapes_step_in_a_call_each(tmp_path, pe):
    """Batches whose shapes differ (an answer length that depends on the samples, say) are
    grouped by shape, each group in one call, each member with its single run's loss."""
    cfg = stack_config(tmp_path, "seeds=[0,3,5]", f"pe={pe}")
    stack = stack_of(cfg)
    stack.eval()
    task = stack.task
    batch = [task.sample(4, n, torch.Generator().manual_seed(n)) for n in (3, 5, 3)]
    assert stack.shape_groups(batch) == [[0, 2], [1]]
    losses = stack.member_losses(batch, 0)
    for k, c in enumerate(member_configs(cfg)):
        alone = single(c, c.seed).eval()
        expected = alone.member_losses([batch[k]], 0)[0]
        torch.testing.assert_close(losses[k], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model", ["decoder", "encoder"])
@pytest.mark.parametrize("pe", sorted(PE_REGISTRY))
def test_every_encoding_stacks_with_each_members_single_loss(tmp_path, pe, model):
    """The contract: a stacked step gives each member its single run's loss; an encoding with
    parameters is held once per member, one without runs once on the folded batch."""
    check_stacked_losses(tmp_path, pe, model)


@pytest.mark.parametrize("pe", ["sinusoidal", "rope", "t5_bias", "rope_2d"])
def test_the_bare_encoder_stacks_with_each_members_single_loss(tmp_path, pe):
    """``model=encoder_bare`` (the Chomsky presets' stacks): 1-D positions and a task's 2-D
    coordinates (``rope_2d`` on the grid) fold alike in the stacked and the single step."""
    check_stacked_losses(tmp_path, pe, "encoder_bare")


def check_stacked_losses(tmp_path, pe, model):
    cfg = stack_config(tmp_path, f"pe={pe}", f"task={encoding_task(pe)}", f"model={model}")
    configs = member_configs(cfg)
    try:
        stack = stack_of(cfg)
    except ConfigError as error:  # an encoding defined for causal models only
        assert model == "encoder" and "causal" in str(error)
        return
    held = [m for m in stack.net.modules() if isinstance(m, MemberEncodings)]
    has_parameters = any(True for _ in single(configs[0], 0).net.pe.parameters())
    assert bool(held) == has_parameters
    # what a model draws in training (dropout, abacus's offset) comes from the process's RNG:
    # the losses are compared on the function itself
    stack.eval()
    batch = [
        TrainBatches(stack.task, cfg.data.batch_size, 4, c.seed, cfg.data.length_sampling)[1]
        for c in configs
    ]
    losses = stack.member_losses(batch, 1)
    torch.stack(list(losses.values())).sum().backward()
    for k, c in enumerate(configs):
        alone = single(c, c.seed).eval()
        expected = alone.member_losses([batch[k]], 1)[0]
        torch.testing.assert_close(losses[k], expected, rtol=1e-5, atol=1e-6)
        # each member's encoding gets its single run's gradient (run at once, through vmap)
        expected.backward()
        for name, module in stack.net.named_modules():
            if isinstance(module, MemberEncodings):
                ours = module.state(selected=False)  # the stacked parameters [K, ...]
                for key, p in alone.net.get_submodule(name).named_parameters():
                    assert ours[key].grad is not None, f"{pe}: {name}.{key} has no gradient"
                    torch.testing.assert_close(ours[key].grad[k], p.grad, rtol=1e-4, atol=1e-6)


@pytest.mark.integration
def test_a_stopped_member_no_longer_changes(tmp_path):
    cfg = stack_config(tmp_path, "trainer.max_steps=3", "trainer.val_check_interval=3")
    stack = stack_of(cfg)
    stack.stop_member(0)
    before = [{k: v.clone() for k, v in member_weights(stack.net, i).items()} for i in (0, 1)]
    trainer = L.Trainer(
        max_steps=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        gradient_clip_val=1.0,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    trainer.fit(stack, datamodule=data_module(cfg, stack.task, [m.seed for m in stack.members]))
    after = [member_weights(stack.net, i) for i in (0, 1)]
    assert all(torch.equal(before[0][k], after[0][k]) for k in before[0])
    assert not all(torch.equal(before[1][k], after[1][k]) for k in before[1])


def test_each_member_clips_its_own_gradient_norm(tmp_path):
    """``trainer.gradient_clip_val``: member ``k``'s gradient is scaled by its own norm, as
    ``torch.nn.utils.clip_grad_norm_`` scales its single run's."""
    from pelab.models.member_steps import clip_member_norms

    cfg = stack_config(tmp_path)
    stack = stack_of(cfg)
    batch = [
        TrainBatches(stack.task, 8, 4, seed, "tokens")[0]
        for seed in [m.seed for m in stack.members]
    ]
    losses = stack.member_losses(batch, 0)
    (losses[0] + 100 * losses[1]).backward()  # member 1's gradient is 100 times larger
    expected = []
    for k in (0, 1):
        grads = [p.grad[k].clone() for p in stack.net.parameters()]
        torch.nn.utils.clip_grad_norm_([torch.nn.Parameter(g) for g in grads], 0.5)
        norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
        expected.append([g * min(1.0, 0.5 / (float(norm) + 1e-6)) for g in grads])
    clip_member_norms(stack.net, 0.5)
    for k in (0, 1):
        for p, g in zip(stack.net.parameters(), expected[k], strict=True):
            torch.testing.assert_close(p.grad[k], g, rtol=1e-5, atol=1e-8)


@pytest.fixture(scope="module")
def stacked_run(tmp_path_factory):
    """``seeds=[0,3]`` trained as one stack (4 steps, validations at 2 and 4)."""
    tmp = tmp_path_factory.mktemp("stack")
    cfg = stack_config(tmp, "trainer.log_every_n_steps=3")
    return tmp, cfg, train(cfg)


@pytest.mark.integration
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
    # each member's loggers get its own training history (a loss at step 2, every
    # log_every_n_steps=3, as its single run logs it; two validations)
    logged = pd.read_csv(next((out / "seed_3" / "csv").glob("*/metrics.csv")))
    losses = logged.dropna(subset=["train/loss"])
    assert losses["step"].tolist() == [2]
    assert logged.dropna(subset=["val/id/exact_match"])["step"].tolist() == [2, 4]
    # the member of seed 3 is the single run of seed 3
    [alone] = train(compose_config([*STACK, "seed=3", "trainer.log_every_n_steps=3"], tmp_path))
    assert records[1]["metrics"]["test"] == alone["metrics"]["test"]
    single_csv = Path(alone["config"]["paths"]["output_dir"]) / "csv"
    single = pd.read_csv(next(single_csv.glob("*/metrics.csv"))).dropna(subset=["train/loss"])
    assert single["step"].tolist() == [2]
    torch.testing.assert_close(
        torch.tensor(losses["train/loss"].tolist()),
        torch.tensor(single["train/loss"].tolist()),
        rtol=1e-4,
        atol=1e-6,
    )
    mine = checkpoint(out / "seed_3" / "checkpoints" / "best.ckpt")["state_dict"]
    theirs = checkpoint(Path(alone["config"]["paths"]["output_dir"]) / "checkpoints/best.ckpt")
    for name, value in mine.items():
        torch.testing.assert_close(value, theirs["state_dict"][name], rtol=1e-4, atol=1e-5)


@pytest.mark.integration
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


@pytest.mark.integration
def test_a_killed_stack_resumes_exactly(stacked_run, tmp_path):
    _, cfg, reference = stacked_run
    broken = stack_config(tmp_path, *fault("raise", 3))
    with pytest.raises(RuntimeError, match="injected fault at step 3"):
        train(broken)
    out = Path(broken.paths.output_dir)
    assert [checkpoint(out / "checkpoints/last.ckpt")["global_step"]] == [2]
    for seed in (0, 3):
        failed = json.loads((out / f"seed_{seed}" / "results.json").read_text())
        assert failed["status"] == "failed" and "injected fault" in failed["error"]
    records = train(stack_config(tmp_path))  # the same command again: resumes the stack
    assert all(r["resumed_from"] == str(out / "checkpoints/last.ckpt") for r in records)
    assert [r["metrics"] for r in records] == [r["metrics"] for r in reference]


@pytest.mark.integration
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
                train(cfg)
            cfg = stack_config(tmp_path / name, *noisy)
        runs.append(train(cfg))
    assert runs[2][0]["resumed_from"].endswith("last.ckpt")
    assert [r["metrics"] for r in runs[0]] == [r["metrics"] for r in runs[1]]
    assert [r["metrics"] for r in runs[0]] == [r["metrics"] for r in runs[2]]
    weights = [
        checkpoint(tmp_path / name / "run" / "checkpoints" / "last.ckpt")["state_dict"]
        for name in ("a", "b", "killed")
    ]
    for other in weights[1:]:
        assert all(torch.equal(weights[0][k], other[k]) for k in weights[0])


@pytest.mark.integration
def test_a_member_of_a_learning_rate_is_its_single_run_and_a_row_of_the_table(tmp_path):
    """``learning_rates=[...]``: each member steps at its own learning rate (the optimizer's
    step, proportional to its rate, scaled per member) and is the single run with that
    ``model.optimizer.lr``, up to rounding."""
    cfg = compose_config([*STACK, "learning_rates=[1e-3,2e-2]"], tmp_path)
    stack = train(cfg)
    assert [r["member_of"]["learning_rates"] for r in stack] == [[1e-3, 2e-2]] * 2
    [alone] = train(compose_config([*STACK, "model.optimizer.lr=2e-2"], tmp_path / "alone"))
    assert stack[1]["metrics"] == alone["metrics"]
    theirs = checkpoint(tmp_path / "alone" / "run" / "checkpoints" / "best.ckpt")["state_dict"]
    for lr, same in (("0.02", True), ("0.001", False)):
        path = Path(cfg.paths.output_dir) / f"lr_{lr}_seed_0" / "checkpoints" / "best.ckpt"
        mine = checkpoint(path)["state_dict"]
        close = all(
            torch.allclose(mine[k], theirs[k].reshape(mine[k].shape), rtol=1e-4, atol=1e-5)
            for k in mine
        )
        assert close == same
    runs = runs_frame(directory_records(Path(cfg.paths.output_dir)))
    assert sorted(runs["model.optimizer.lr"]) == ["0.001", "0.02"]


@pytest.mark.integration
def test_a_plain_run_is_a_stack_of_one_with_its_single_run_layout(tmp_path):
    """One path: a plain run trains as K = 1 and keeps a single run's layout (its record and
    ``best.ckpt`` in its own directory, weights in ``torch.nn``'s shapes)."""
    [record] = train(compose_config([*STACK, "seed=3"], tmp_path))
    out = Path(record["config"]["paths"]["output_dir"])
    assert record["status"] == "completed" and "member_of" not in record
    best = checkpoint(out / "checkpoints" / "best.ckpt")["state_dict"]
    assert best["net.blocks.0.attn.qkv.weight"].dim() == 2
    assert not any(p.name.startswith("seed_") for p in out.iterdir())


def test_a_members_best_checkpoint_holds_that_member_alone(tmp_path):
    """``torch.save`` writes a view's whole storage: member 3's ``best.ckpt``, written from a
    stack of 4, is the size of a single run's, not the stack's, and loads as a single run's
    (``load_weights``: ``eval.py``, ``load_run``) and into a stack (``load_best``)."""
    cfg = stack_config(tmp_path, "seeds=[0,1,2,3]")
    stack, alone = stack_of(cfg), single(member_configs(cfg)[0], 0)
    for scores in [m.scores for m in stack.members + alone.members]:
        scores["val"] = {}  # a validation's, which the checkpoint carries
    trainer = SimpleNamespace(callbacks=[], current_epoch=0, global_step=1)
    member, own = tmp_path / "member.ckpt", tmp_path / "single.ckpt"
    BestCheckpoints([member] * 4, [{}] * 4).save(trainer, stack, 3)
    BestCheckpoints([own], [{}]).save(trainer, alone, 0)
    assert member.stat().st_size <= 1.3 * own.stat().st_size
    expected = {k: v.clone() for k, v in member_weights(stack.net, 3).items()}
    load_weights(alone, member)
    assert all(torch.equal(v, expected[k]) for k, v in member_weights(alone.net, 0).items())
    BestCheckpoints([member, *[tmp_path / "none.ckpt"] * 3], [{}] * 4).load_best(stack)
    assert all(torch.equal(v, expected[k]) for k, v in member_weights(stack.net, 0).items())


def test_a_members_state_round_trips_and_the_per_field_format_still_restores():
    """``save_members`` writes each member's one state dict; a checkpoint written before
    (per-field lists under ``pelab_members``, scores under ``pelab_scores``) restores the same
    members; one of another member count restores nothing."""
    scores = {4: {"exact_match": 1.0, "next_token_acc": 1.0}}
    saved = [
        MemberState(0, stopped=True, decay_from=300, scores={"val": scores, "test": scores}),
        MemberState(1, history=[(99, {"train/loss": 0.5})]),
    ]
    checkpoint: dict = {}
    save_members(checkpoint, saved)
    per_field = {
        "pelab_engine": 2,
        "pelab_members": {
            "stopped": [True, False],
            "history": [[], [(99, {"train/loss": 0.5})]],
            "decay_from": [300, None],
        },
        "pelab_scores": [{"val": scores}, {}],
    }
    for written in (checkpoint, per_field):
        members = [MemberState(0), MemberState(1)]
        restore_members(written, members)
        assert [(m.stopped, m.decay_from, m.history) for m in members] == [
            (True, 300, []),
            (False, None, [(99, {"train/loss": 0.5})]),
        ]
        assert [m.scores for m in members] == [{"val": scores}, {}]  # the test's: its own run's
    three = [MemberState(k) for k in range(3)]
    restore_members(checkpoint, three)
    assert three == [MemberState(k) for k in range(3)]
