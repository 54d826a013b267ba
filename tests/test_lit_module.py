from functools import partial

import pytest
import torch

from pelab.lit_module import SequenceModel
from pelab.member_log import DECAY_KEY
from pelab.model_kinds import DecoderKind
from pelab.models.dims import NetDims
from pelab.models.stacked import stack_members
from pelab.models.transformer import Transformer
from pelab.pe import PE_REGISTRY
from pelab.positions import contiguous
from pelab.schedule import warmup_cosine
from pelab.tasks import TASK_REGISTRY


def test_warmup_then_cosine_to_the_floor():
    f = warmup_cosine(warmup_steps=10, total_steps=110, min_ratio=0.1)
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(60) == pytest.approx(0.1 + 0.9 * 0.5)  # half-way through the decay
    assert f(110) == pytest.approx(0.1) and f(500) == pytest.approx(0.1)


def test_warmup_then_constant_without_a_horizon():
    """``total_steps=None`` (``decay_at``): the stable phase; each member decays on its own."""
    f = warmup_cosine(warmup_steps=10, total_steps=None, min_ratio=0.1)
    assert f(0) == pytest.approx(0.1) and f(9) == f(10) == f(10**6) == 1.0


def make_net(task):
    dims = NetDims(
        vocab_size=task.vocab_size,
        max_len=task.max_sequence_length(),
        d_model=16,
        n_heads=2,
        n_layers=1,
    )
    return Transformer(dims, partial(PE_REGISTRY["rope"]), causal=True)


def make_model(task, members=1, **options):
    net = stack_members([make_net(task) for _ in range(members)])
    seeds = list(range(members))
    return SequenceModel(
        net,
        DecoderKind,
        task,
        optimizer=partial(torch.optim.AdamW),
        seeds=seeds,
        live=members == 1,
        **options,
    )


def test_decay_at_starts_each_members_decay_once_it_nears_the_criterion(monkeypatch):
    """``decay_at``: a member's rate holds until its worst in-distribution exact match reaches
    ``decay_at``, then follows a cosine to ``min_lr_ratio`` over ``decay_steps``; another
    member keeps its rate; a resumed run keeps where each decay began."""
    task = TASK_REGISTRY["copy"](train_lengths=[1, 4], eval_lengths=[2, 4, 8])
    options = {"decay_at": 0.9, "decay_steps": 100, "min_lr_ratio": 0.1}
    model = make_model(task, members=2, **options)
    step = [300]
    monkeypatch.setattr(SequenceModel, "global_step", property(lambda self: step[0]))

    def validate(*worst_at_4):
        for k, worst in enumerate(worst_at_4):
            model.members[k].scores["val"] = {2: {"exact_match": 1.0}, 4: {"exact_match": worst}}
        model._end_epoch("val")

    def decay_from():
        return [m.decay_from for m in model.members]

    def rates():
        return model.optimization.rates(model.members, step[0])

    model.epoch_scores = lambda split, k: {}  # the scores set above stand as the validation's
    model.log = lambda *a, **k: None
    validate(0.85, 0.95)  # length 8 is out of distribution: never part of the criterion
    assert decay_from() == [None, 300] and rates() is None  # cos(0) = 1
    step[0] = 350
    assert rates() == pytest.approx([1.0, 0.1 + 0.9 * 0.5])
    step[0] = 500
    validate(0.93, 0.5)  # member 1 fell back: its decay goes on
    assert decay_from() == [500, 300]
    assert rates() == pytest.approx([1.0, 0.1])
    model.stop_member(0)
    assert rates() == pytest.approx([0.0, 0.1])

    single = make_model(task, **options)
    logged = {}
    single.log = lambda key, value, **k: logged.__setitem__(key, value)
    monkeypatch.setattr("pelab.lit_module.logging_step", lambda trainer, step: True)
    single.members[0].decay_from = 250  # step 300: half-way through its decay, logged
    step[0] = 300
    single.training_step(((torch.tensor([[3, 4]]), torch.tensor([[3, 4]])),), 0)
    single.on_train_batch_end(None, None, 0)
    assert logged[DECAY_KEY] == pytest.approx(0.1 + 0.9 * 0.5)

    checkpoint = {}
    model.on_save_checkpoint(checkpoint)
    resumed = make_model(task, members=2, **options)
    resumed.on_load_checkpoint(checkpoint)
    assert [m.decay_from for m in resumed.members] == [500, 300]
    assert [m.stopped for m in resumed.members] == [True, False]
    assert [m.scores for m in resumed.members] == [{"val": m.scores["val"]} for m in model.members]


def test_without_decay_at_the_members_rates_never_decay(monkeypatch):
    task = TASK_REGISTRY["copy"](train_lengths=[1, 4], eval_lengths=[4])
    model = make_model(task, members=2)
    monkeypatch.setattr(SequenceModel, "global_step", property(lambda self: 1000))
    model.members[0].scores["val"] = {4: {"exact_match": 1.0}}
    model.optimization.start_decay(model.members[0], task.in_distribution, 1000)
    assert [m.decay_from for m in model.members] == [None, None]
    assert model.optimization.rates(model.members, 1000) is None


def test_the_schedule_options_reach_the_model(tiny_cfg):
    from pelab.assembly import build_model, build_task

    cfg = tiny_cfg("model.schedule.decay_at=0.9", "model.schedule.decay_steps=250")
    model = build_model(cfg, build_task(cfg))
    assert (model.optimization.decay_at, model.optimization.decay_steps) == (0.9, 250)


def test_loss_is_computed_on_answer_tokens_only():
    task = TASK_REGISTRY["copy"](train_lengths=[3, 3], eval_lengths=[3])
    model = make_model(task)
    model.log = lambda *a, **k: None
    prompt = torch.tensor([[3, 4, 5]])
    a = model.training_step(((prompt, torch.tensor([[3, 4, 5]])),), 0)  # one member's batch
    # the loss changes with the answer; the same answer with another prompt token changes it too
    b = model.training_step(((prompt, torch.tensor([[5, 4, 3]])),), 0)
    assert a.item() != pytest.approx(b.item())
    inputs, answer_slice = DecoderKind.teacher_forcing(prompt, torch.tensor([[3, 4, 5]]))
    logits = model.net(inputs)[:, answer_slice]
    expected = torch.nn.functional.cross_entropy(logits[0], torch.tensor([3, 4, 5]))
    assert a.item() == pytest.approx(expected.item(), rel=1e-5)


def test_metrics_per_length_and_in_out_of_distribution_means():
    task = TASK_REGISTRY["copy"](train_lengths=[1, 4], eval_lengths=[2, 4, 8])
    model = make_model(task)
    logged = {}
    model.log = lambda key, value, **k: logged.__setitem__(key, value)
    copying = {  # the answer is the prompt, decoded or in one teacher-forced pass
        "predict": staticmethod(lambda net, p, m, pos: p.clone()),
        "answer_logits": staticmethod(lambda net, p, a, pos: torch.nn.functional.one_hot(p, 19)),
    }
    model.kind = type("Fixed", (), copying)
    # a "model" that copies its prompt: all right on copy, but we feed wrong answers at length 8
    for idx, length in enumerate(task.eval_lengths):
        prompt = torch.randint(3, 19, (4, length))
        answer = prompt.clone()
        if length == 8:
            answer[:2, :4] = 0  # two of four samples wrong on half of their tokens
        model._evaluate("test", {"prompt": prompt, "answer": answer}, 0, idx)
    model._end_epoch("test")
    assert logged["test/exact_match/len_2"] == 1.0 and logged["test/exact_match/len_8"] == 0.5
    assert logged["test/token_acc/len_8"] == pytest.approx(0.75)
    assert logged["test/id/exact_match"] == 1.0 and logged["test/ood/exact_match"] == 0.5
    assert logged["test/ood/token_acc"] == pytest.approx(0.75)
    scores = model.members[0].scores
    assert scores["test"][8] == {"exact_match": 0.5, "token_acc": pytest.approx(0.75)}


@pytest.mark.processes
@pytest.mark.integration
def test_model_compile_trains_the_same_function_and_keeps_checkpoint_keys(tiny_cfg):
    """``model.compile=true``: the compiled training forward gives the eager one's logits, and
    the module's state (what checkpoints hold) is the same as without it."""
    from pelab.assembly import build_model, build_task

    cfg = tiny_cfg("model.compile=true", "task.train_lengths=[3,3]", "task.eval_lengths=[3]")
    model = build_model(cfg, build_task(cfg))
    assert model.train_logits != DecoderKind.answer_logits
    prompt = torch.tensor([[3, 4, 5], [5, 4, 3]])
    positions = contiguous(3 + 3 + 2)
    compiled = model.train_logits(model.net, prompt, prompt, positions)
    assert torch.allclose(
        compiled, DecoderKind.answer_logits(model.net, prompt, prompt, positions), atol=1e-5
    )
    plain = build_model(tiny_cfg("task.train_lengths=[3,3]", "task.eval_lengths=[3]"), model.task)
    assert plain.train_logits == DecoderKind.answer_logits
    assert list(model.state_dict()) == list(plain.state_dict())


def test_validation_can_score_only_some_lengths():
    task = TASK_REGISTRY["copy"](train_lengths=[1, 4], eval_lengths=[2, 4, 8])
    model = make_model(task)
    model.lengths["val"] = [2, 4]  # what a competence budget validates
    model.log = lambda *a, **k: None
    copying = {  # the answer is the prompt, decoded or in one teacher-forced pass
        "predict": staticmethod(lambda net, p, m, pos: p.clone()),
        "answer_logits": staticmethod(lambda net, p, a, pos: torch.nn.functional.one_hot(p, 19)),
    }
    model.kind = type("Fixed", (), copying)
    for idx, length in enumerate(model.lengths["val"]):
        prompt = torch.randint(3, 19, (4, length))
        model._evaluate("val", {"prompt": prompt, "answer": prompt}, 0, idx)
    model._end_epoch("val")
    assert list(model.members[0].scores["val"]) == [2, 4]
    assert model.members[0].scores["val"][4] == {"exact_match": 1.0, "next_token_acc": 1.0}


@pytest.mark.integration
def test_a_compile_that_fails_falls_back_to_eager_with_one_warning(
    tiny_cfg, tmp_path, monkeypatch, caplog
):
    """E.g. TorchInductor's CppCompileError on a machine whose compiler cannot build the kernel:
    the run goes on eagerly and computes what an uncompiled run computes."""
    from pelab.train import train

    def failing_compile(fn):
        def compiled(*args):
            raise RuntimeError("CppCompileError: C++ compile error\nlong compiler output")

        return compiled

    [plain] = train(tiny_cfg("seed=3"))
    monkeypatch.setattr("pelab.lit_module.torch.compile", failing_compile)
    cfg = tiny_cfg("seed=3", "model.compile=true")
    cfg.paths.output_dir = str(tmp_path / "compiled")
    with caplog.at_level("WARNING", logger="pelab.lit_module"):
        [fallen] = train(cfg)
    assert fallen["status"] == "completed"
    assert fallen["metrics"]["test"] == plain["metrics"]["test"]
    warnings = [r.getMessage() for r in caplog.records if "torch.compile failed" in r.getMessage()]
    assert warnings == [
        "model.compile=true: torch.compile failed (RuntimeError: CppCompileError: C++ compile "
        "error); training goes on without compiling (set model.compile=false to skip the attempt)"
    ]


def test_members_share_positions_only_from_a_sampler_that_shares_them():
    """A randomized sample of one sequence is ``[1, n]`` like contiguous positions, but each
    member's own: folded without comparing values on the device, by the sampler's ``shared``."""
    from pelab.models.stacked import fold_positions
    from pelab.positions import ContiguousPositions, RandomizedPositions

    randomized = RandomizedPositions(64)
    own = [randomized(1, 3, 3, torch.Generator().manual_seed(seed)) for seed in (0, 1)]
    assert own[0].shape == (1, 8) and not torch.equal(own[0], own[1])
    assert not randomized.shared and ContiguousPositions.shared
    assert torch.equal(fold_positions(own, randomized.shared), torch.cat(own))
    contiguous = [ContiguousPositions()(4, 3, 3) for _ in range(2)]
    assert fold_positions(contiguous, True) is contiguous[0]  # one broadcast [1, n]
