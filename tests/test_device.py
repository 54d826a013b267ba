"""The engine on a device other than the CPU, checked on a CPU (``tests.device``): a stack's
every step (forward of all members and of a selected one, backward, each member's clipping, an
optimizer step with a stopped member, ``decay_at`` and ``learning_rates``, cached greedy
decoding) runs with its parameters on a second device, as on a GPU; a whole fit makes no tensor
without naming its device; and a training step reads nothing from the device on the host but at
a logging step, except in the encodings named here."""

from __future__ import annotations

import pytest
import torch

import pelab.train as training
from benchmarks.syncs import CountHostSyncs, HostSyncs
from pelab.assembly import build_members, build_task
from pelab.data.datamodule import TrainBatches
from pelab.errors import ConfigError
from pelab.members import member_configs
from pelab.models.member_steps import clip_member_norms
from pelab.models.stacked import member_weights
from pelab.pe.base import PE_REGISTRY
from pelab.train import train
from tests.conftest import TINY, compose_config, encoding_task
from tests.device import DEVICE, DevicelessTensors, OnDevice, second_device, to_second_device

ENGINE = [
    *TINY,
    "logger=csv",
    "seeds=[0]",
    "learning_rates=[1e-3,5e-4]",
    "model.schedule.decay_at=0.5",
]
SHORT = ["task.train_lengths=[1,4]", "task.eval_lengths=[4,6]"]  # few steps to decode
# one encoding per way of acting (rotation, bias, table, a network per member): the encoder-decoder
REPRESENTATIVES = ["rope", "t5_bias", "learned", "fire"]
# the encodings whose training forward reads positions on the host, and why
SYNCING = {
    # the largest position, to refuse one beyond the table with a ConfigError (on a GPU an index
    # out of range is a device-side assert that kills the process, with no message of ours)
    "learned": "range check",
    "hierarchical": "range check",
    # an adaptive ODE solver chooses its steps on the host; the distinct positions index them
    "floater": "adaptive ODE steps",
    # whether the positions are contiguous (the relative shift) or gathered by distinct distance
    "transformer_xl": "contiguity and distinct distances",
}


def engine_case(tmp_path, pe: str, model: str = "decoder"):
    task = encoding_task(pe)
    lengths = ["task.train_lengths=[2,3]", "task.eval_lengths=[3]"] if task == "grid" else SHORT
    cfg = compose_config(
        [*ENGINE, *lengths, f"pe={pe}", f"task={task}", f"model={model}"], tmp_path
    )
    try:
        stack = build_members(member_configs(cfg), build_task(cfg))
    except ConfigError as error:  # an encoding defined for causal models only
        assert model != "decoder" and "causal" in str(error)
        pytest.skip(f"pe={pe} is defined for causal models only")
    batch = [TrainBatches(stack.task, 8, 4, stack.members[k].seed, "tokens")[1] for k in range(2)]
    return stack, batch


CASES = [(pe, kind) for kind in ("decoder", "encoder") for pe in sorted(PE_REGISTRY)]
CASES += [(pe, "encoder_decoder") for pe in REPRESENTATIVES]


@pytest.mark.parametrize(("pe", "model"), CASES)
def test_every_step_of_a_stack_runs_on_a_second_device(tmp_path, pe, model):
    stack, batch = engine_case(tmp_path, pe, model)
    stack.eval()  # what a model draws in training (abacus's offset) comes from the process's RNG
    expected = stack.member_losses(batch, 1)  # on the CPU, before the weights move
    to_second_device(stack)
    optimizer = stack.optimization.factory(stack.net.parameters(), lr=1e-3)
    with second_device() as device:
        batch = [tuple(t.to(DEVICE, non_blocking=True) for t in b) for b in batch]
        losses = stack.member_losses(batch, 1)  # every member, in one call
        for k, loss in losses.items():
            assert isinstance(loss, OnDevice)
            torch.testing.assert_close(loss.inner, expected[k], rtol=1e-5, atol=1e-6)
        stack.train()
        stack.stop_member(0)  # member 0 stopped: member 1 alone (``select``)
        stack.members[1].decay_from = -100  # member 1 is decaying, at the smaller learning rate
        before = [
            {n: t.inner.clone() for n, t in member_weights(stack.net, k).items()} for k in (0, 1)
        ]
        stack.member_losses(batch, 2)[1].backward()
        clip_member_norms(stack.net, 0.5)
        stack.optimizer_step(0, 0, optimizer)
        after = [{n: t.inner for n, t in member_weights(stack.net, k).items()} for k in (0, 1)]
        stack.eval()
        prompt, answer = batch[1]
        both = stack.correct(prompt, answer, 8, 0, members=[0, 1])  # cached greedy decoding
        one = stack.correct(prompt, answer, 8, 0, members=[1])
    assert all(torch.equal(before[0][n], after[0][n]) for n in after[0])  # stopped
    assert any(not torch.equal(before[1][n], after[1][n]) for n in after[1])
    assert isinstance(both, OnDevice) and both.shape == (2 * answer.shape[0], answer.shape[1])
    assert torch.equal(both.inner[answer.shape[0] :], one.inner)
    assert not device.blocking_copies
    assert bool(device.host_reads) == (pe in SYNCING), device.host_reads


def test_the_second_device_catches_a_cpu_tensor():
    """The check the tests above rely on: what CUDA refuses, it refuses; what CUDA takes (a
    0-dim CPU scalar, CPU indices, a copy across devices) it takes, and it notes what would
    stop the host."""
    from tests.device import DeviceMismatch

    with second_device() as device:
        x = torch.ones(3, 2, device=DEVICE)
        assert isinstance(x, OnDevice) and x.device == DEVICE
        with pytest.raises(DeviceMismatch, match="same device"):
            x.index_select(0, torch.tensor([0, 1]))
        with pytest.raises(DeviceMismatch, match="same device"):
            x + torch.zeros(3, 2)
        y = x * torch.tensor(2.0) + x[torch.tensor([0, 2])].sum()
        assert torch.equal((y + x.new_zeros(3, 2)).inner, torch.full((3, 2), 6.0))
        assert float(y[0, 0]) == 6.0
        assert torch.equal(y.to("cpu"), torch.full((3, 2), 6.0))
        assert y[y > 0].shape == (6,)  # a mask's count is read on the host
    reads = ["aten._local_scalar_dense.default", "aten._to_copy.default to the CPU"]
    assert device.host_reads == [*reads, "aten.index.Tensor"]  # float(), .to("cpu"), the mask
    assert device.blocking_copies == ["aten.index.Tensor: CPU indices [(2,)]"]  # CUDA copies them


@pytest.fixture(scope="module")
def watched_fit(tmp_path_factory):
    """A short fit of a two-member stack (clipping, learning rates, ``decay_at``) with every
    tensor factory and, per training step, every host read watched."""
    tmp = tmp_path_factory.mktemp("fit")
    overrides = ["trainer.max_steps=9", "trainer.val_check_interval=4"]
    cfg = compose_config([*ENGINE, *SHORT, *overrides, "trainer.log_every_n_steps=3"], tmp)
    syncs, deviceless = HostSyncs(), DevicelessTensors()
    counter = CountHostSyncs(syncs)
    original = training.make_trainer

    def make_trainer(*args, **kwargs):
        trainer = original(*args, **kwargs)
        trainer.callbacks.append(counter)
        return trainer

    training.make_trainer = make_trainer
    try:
        with deviceless, syncs:
            records = train(cfg)
    finally:
        training.make_trainer = original
    return records, deviceless.found, counter.per_step


@pytest.mark.integration
def test_a_fit_makes_every_tensor_on_a_named_device(watched_fit):
    records, found, _ = watched_fit
    assert [r["status"] for r in records] == ["completed", "completed"]
    assert found == []


@pytest.mark.integration
def test_a_training_step_reads_nothing_from_the_device_but_to_log(watched_fit):
    """Steps 0-8 with ``log_every_n_steps=3``: steps 2, 5 and 8 log (the members' losses, the
    non-finite check), validations follow steps 3, 7 and 8; every other step queues its work
    on the device and goes on."""
    _, _, per_step = watched_fit
    assert sorted(per_step) == list(range(9))
    quiet = {s: n for s, n in per_step.items() if s not in (2, 3, 5, 7, 8)}
    assert quiet == {0: 0, 1: 0, 4: 0, 6: 0}, per_step
    assert all(per_step[s] > 0 for s in (2, 3, 5, 7, 8)), per_step  # the count sees reads
