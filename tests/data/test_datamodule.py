"""Training batches: a pure function of (seed, step), lengths drawn as ``data.length_sampling``
says."""

import signal
from collections import Counter
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from pelab.assembly import check_training, data_module
from pelab.data.datamodule import TaskData, TrainBatches, ignore_job_signals
from pelab.errors import ConfigError
from pelab.reliability.checks.validate import check_types
from pelab.tasks import TASK_REGISTRY
from tests.conftest import compose_config


@pytest.fixture
def copy_task():
    return TASK_REGISTRY["copy"](train_lengths=[1, 16])


def lengths(batches: TrainBatches) -> list[int]:
    return [batches[i][0].shape[1] for i in range(len(batches))]


def test_tokens_draw_each_length_in_proportion_to_itself(copy_task):
    """``P(n) = n / 136`` over lengths 1..16: every token position equally often."""
    drawn = Counter(lengths(TrainBatches(copy_task, 1, 13600, seed=0, length_sampling="tokens")))
    for n in range(1, 17):
        expected = 13600 * n / 136
        assert abs(drawn[n] - expected) < 4 * expected**0.5 + 5, (n, drawn[n], expected)
    assert drawn[16] > 10 * drawn[1]


def test_uniform_draws_every_length_equally_often_as_it_always_did(copy_task):
    batches = TrainBatches(copy_task, 1, 3200, seed=0, length_sampling="uniform")
    drawn = Counter(lengths(batches))
    assert set(drawn) == set(range(1, 17)) and max(drawn.values()) < 1.35 * min(drawn.values())
    # the stream of every run trained before the option existed
    expected = [
        int(torch.randint(1, 17, (1,), generator=torch.Generator().manual_seed(i)))
        for i in range(50)
    ]
    assert lengths(TrainBatches(copy_task, 1, 50, seed=0))[:50] == expected


def test_batches_are_a_pure_function_of_seed_and_step(copy_task):
    a = TrainBatches(copy_task, 4, 20, seed=3, length_sampling="tokens")
    b = TrainBatches(copy_task, 4, 20, seed=3, length_sampling="tokens")
    assert all(torch.equal(a[i][0], b[i][0]) for i in (0, 7, 19))


@pytest.mark.parametrize("make", [TrainBatches, TaskData])
def test_an_unknown_length_sampling_is_a_clear_error(copy_task, make):
    message = "data.length_sampling='lengths' is not a choice; valid choices: uniform, tokens"
    with pytest.raises(ConfigError, match=message):
        make(copy_task, 4, 20, 0, length_sampling="lengths")


@pytest.mark.parametrize("sampling", ["uniform", "tokens"])
def test_a_curriculum_opens_the_lengths_one_at_a_time_shortest_first(copy_task, sampling):
    """Lengths 1-16 over 1600 steps: length n opens at step 100 (n - 1); each stage draws
    among the lengths open so far, the newest among them; from step 1600 on, all of them."""
    batches = TrainBatches(
        copy_task, 1, 2400, seed=1, length_sampling=sampling, curriculum_steps=1600
    )
    drawn = lengths(batches)
    for stage in range(16):
        in_stage = set(drawn[100 * stage : 100 * (stage + 1)])
        assert max(in_stage) == stage + 1, (stage, sorted(in_stage))
    assert set(drawn[1600:]) == set(range(1, 17))
    # off: the stream of every run trained before the option existed
    plain = TrainBatches(copy_task, 1, 50, seed=1, length_sampling=sampling)
    assert lengths(plain) == lengths(
        TrainBatches(copy_task, 1, 50, seed=1, length_sampling=sampling, curriculum_steps=0)
    )


def test_a_curriculum_is_set_by_data_curriculum_steps_and_checked(copy_task, tmp_path):
    cfg = compose_config(["data.curriculum_steps=10", "trainer.max_steps=20"], tmp_path)
    data = data_module(cfg, copy_task)
    assert [member.curriculum_steps for member in data.train_batches().members] == [10]
    check_training(cfg)
    with pytest.raises(
        ConfigError, match=r"data.curriculum_steps=30 exceeds trainer.max_steps=20"
    ):
        check_training(
            compose_config(["data.curriculum_steps=30", "trainer.max_steps=20"], tmp_path)
        )
    with pytest.raises(
        ConfigError, match=r"data.curriculum_steps=-1 is out of range: it must be >= 0"
    ):
        check_types(compose_config(["data.curriculum_steps=-1"], tmp_path), [])
    for steps in (-1, 21, 1.5, True):
        with pytest.raises(ValueError, match=rf"data.curriculum_steps={steps!r}: it must be"):
            TaskData(copy_task, 4, 20, 0, curriculum_steps=steps)


def loaders(data: TaskData) -> list[DataLoader]:
    return [data.train_dataloader(), *data.val_dataloader(), *data.test_dataloader()]


def test_every_loader_gets_data_num_workers(copy_task, tmp_path):
    """Train, val and test; not persistent (``TaskData``: the RNG draws); pinned batches for a
    run on a CUDA device only, with workers or without."""
    data = TaskData(copy_task, 4, 20, [0, 1], cache_dir=tmp_path, num_workers=2)
    for loader in loaders(data):
        assert (loader.num_workers, loader.persistent_workers, loader.pin_memory) == (2, False, 0)
        assert loader.worker_init_fn is ignore_job_signals
    data.trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cuda", 0)))
    assert all(loader.pin_memory for loader in loaders(data))
    plain = TaskData(copy_task, 4, 20, 0, cache_dir=tmp_path)
    assert all(loader.num_workers == 0 and not loader.pin_memory for loader in loaders(plain))
    plain.trainer = data.trainer  # no workers: pinned in the main process, on a CUDA device
    assert all(loader.num_workers == 0 and loader.pin_memory for loader in loaders(plain))


def test_a_bad_num_workers_is_a_clear_error(copy_task, tmp_path):
    for workers in (-1, 1.5, True):
        with pytest.raises(ValueError, match=rf"num_workers={workers!r}: it must be an int >= 0"):
            TaskData(copy_task, 4, 20, 0, num_workers=workers)
    with pytest.raises(ConfigError, match=r"data.num_workers=-1 is out of range: it must be >= 0"):
        check_types(compose_config(["data.num_workers=-1"], tmp_path), [])


class Signals(Dataset):
    """Item: whether the process reading it ignores SIGTERM and SIGUSR1."""

    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int) -> bool:
        ignored = [signal.getsignal(s) is signal.SIG_IGN for s in (signal.SIGTERM, signal.SIGUSR1)]
        return all(ignored)


@pytest.mark.processes
@pytest.mark.integration  # starts worker processes
def test_workers_make_the_batches_and_rng_draws_of_no_workers(copy_task, tmp_path):
    """Batches with 2 workers are those without (a resumed loader's too), torch's global RNG
    (dropout's) is drawn alike, and a worker ignores the job's signals (pre-emption, requeue)."""

    def batches(workers: int) -> tuple[list, torch.Tensor]:
        torch.manual_seed(0)
        data = TaskData(copy_task, 4, 6, [0, 1], cache_dir=tmp_path, num_workers=workers)
        train = data.train_dataloader()
        drawn = [*train, *data.val_dataloader()[0], *data.val_dataloader()[0]]
        train.load_state_dict({"next_batch": 4})  # a resumed run's
        return [*drawn, *train], torch.get_rng_state()

    (none, rng), (two, rng_two) = batches(0), batches(2)
    assert torch.equal(rng, rng_two)
    torch.testing.assert_close(none[-2:], none[4:6], rtol=0, atol=0)  # resumed at batch 4
    torch.testing.assert_close(two, none, rtol=0, atol=0)
    options = TaskData(copy_task, 4, 6, 0, num_workers=2).loader_options()
    assert list(DataLoader(Signals(), batch_size=None, **options)) == [True, True]
