import json
import multiprocessing
import shutil
import time

import pytest
import torch

from pelab.data import eval_sets
from pelab.data.datamodule import TaskData, TrainBatches
from pelab.tasks import TASK_REGISTRY


def copy_task(**kwargs):
    return TASK_REGISTRY["copy"](**kwargs)


def visible(directory):
    """Entries other than hidden ones (the lock directory, temporary sets)."""
    return [p for p in directory.iterdir() if not p.name.startswith(".")]


def test_eval_set_is_built_once_then_read_from_the_cache(tmp_path, monkeypatch):
    task = copy_task()
    first = eval_sets.load_eval_set(task, "val", 8, 16, tmp_path)
    assert len(visible(tmp_path)) == 1

    def no_rebuild(*args, **kwargs):
        raise AssertionError("the cached set should have been reused")

    monkeypatch.setattr(eval_sets, "build_eval_set", no_rebuild)
    second = eval_sets.load_eval_set(task, "val", 8, 16, tmp_path)
    assert torch.equal(first[:]["prompt"], second[:]["prompt"])
    assert torch.equal(first[:]["answer"], second[:]["answer"])


def test_a_verified_set_is_read_from_disk_once_per_process_while_its_files_stay(
    tmp_path, monkeypatch
):
    """A run reads its test sets twice (its test, then the chance levels): the second read is
    the set this process verified, until the set's files change (then it is read and verified
    again; the corrupt sets below are caught so)."""
    task = copy_task()
    eval_sets.load_eval_set(task, "test", 8, 16, tmp_path)
    reads = []
    load = eval_sets.datasets.load_from_disk
    monkeypatch.setattr(
        eval_sets.datasets, "load_from_disk", lambda path: reads.append(path) or load(path)
    )
    again = eval_sets.load_eval_set(task, "test", 8, 16, tmp_path)
    assert reads == [] and len(again) == 16
    (path,) = visible(tmp_path)
    manifest = path / eval_sets.MANIFEST
    manifest.write_text(manifest.read_text() + "\n")  # a file changed: read and verified again
    assert len(eval_sets.load_eval_set(task, "test", 8, 16, tmp_path)) == 16
    assert reads == [str(path)]


def test_cached_sets_hold_correct_answers(tmp_path):
    task = TASK_REGISTRY["reverse"]()
    data = eval_sets.load_eval_set(task, "test", 5, 32, tmp_path)
    columns = data[:]
    assert columns["prompt"].shape == (32, 5)
    assert torch.equal(columns["answer"], columns["prompt"].flip(-1))


def test_every_data_parameter_changes_the_cache_key():
    base = eval_sets.cache_key(copy_task(), "val", 8, 16)
    assert base == eval_sets.cache_key(copy_task(), "val", 8, 16)
    others = [
        eval_sets.cache_key(copy_task(num_symbols=7), "val", 8, 16),
        eval_sets.cache_key(copy_task(eval_seed=1), "val", 8, 16),
        eval_sets.cache_key(TASK_REGISTRY["sort"](), "val", 8, 16),
        eval_sets.cache_key(copy_task(), "test", 8, 16),
        eval_sets.cache_key(copy_task(), "val", 9, 16),
        eval_sets.cache_key(copy_task(), "val", 8, 17),
    ]
    assert len({base, *others}) == 7


def test_val_and_test_sets_differ_and_do_not_depend_on_the_training_seed(tmp_path):
    task = copy_task()
    val = eval_sets.load_eval_set(task, "val", 12, 64, None)
    test = eval_sets.load_eval_set(task, "test", 12, 64, None)
    assert not torch.equal(val[:]["prompt"], test[:]["prompt"])
    dm = TaskData(task, batch_size=4, num_batches=2, seeds=99, cache_dir=tmp_path)
    assert torch.equal(
        next(iter(dm.val_dataloader()[1]))["prompt"],
        eval_sets.load_eval_set(task, "val", 16, task.n_val, None)[:]["prompt"],
    )


def test_training_batches_are_a_function_of_seed_and_step():
    task = copy_task(train_lengths=[3, 6], eval_lengths=[6])
    a, b = TrainBatches(task, 8, 100, seed=0), TrainBatches(task, 8, 100, seed=1)
    assert torch.equal(a[17][0], TrainBatches(task, 8, 100, seed=0)[17][0])
    assert not torch.equal(a[17][0], a[18][0])
    assert not all(
        torch.equal(a[i][0], b[i][0]) for i in range(5) if a[i][0].shape == b[i][0].shape
    )
    lengths = {a[i][0].shape[1] for i in range(100)}
    assert lengths == {3, 4, 5, 6}


def test_one_loader_per_eval_length(tmp_path):
    task = copy_task(eval_lengths=[4, 16, 40])
    dm = TaskData(task, batch_size=4, num_batches=2, seeds=0, cache_dir=tmp_path)
    shapes = [next(iter(loader))["prompt"].shape[1] for loader in dm.test_dataloader()]
    assert shapes == [4, 16, 40]


def test_bad_batch_size_is_refused():
    with pytest.raises(ValueError, match="batch sizes must be >= 1"):
        TaskData(copy_task(), batch_size=0, num_batches=1, seeds=0)


def damage_truncated_data(path):
    data = next(path.glob("*.arrow"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])


def damage_changed_values(path):
    """Another set of the same shape saved in its place: only the checksum can tell."""
    other = eval_sets.build_eval_set(copy_task(eval_seed=99), "val", 8, 16)
    manifest = (path / eval_sets.MANIFEST).read_text()
    shutil.rmtree(path)
    other.save_to_disk(str(path))
    (path / eval_sets.MANIFEST).write_text(manifest)


def damage_missing_manifest(path):
    """What a writer of the previous format, or one killed mid-way, could leave."""
    (path / eval_sets.MANIFEST).unlink()


def damage_missing_data(path):
    next(path.glob("*.arrow")).unlink()


def damage_wrong_row_count(path):
    manifest = json.loads((path / eval_sets.MANIFEST).read_text())
    (path / eval_sets.MANIFEST).write_text(json.dumps({**manifest, "rows": 15}))


@pytest.mark.parametrize(
    "damage",
    [
        damage_truncated_data,
        damage_changed_values,
        damage_missing_manifest,
        damage_missing_data,
        damage_wrong_row_count,
    ],
)
def test_a_corrupt_or_partial_set_is_detected_and_rebuilt(tmp_path, caplog, damage):
    task = copy_task()
    expected = eval_sets.build_eval_set(task, "val", 8, 16).with_format("torch")[:]
    eval_sets.load_eval_set(task, "val", 8, 16, tmp_path)
    (path,) = visible(tmp_path)
    damage(path)
    with caplog.at_level("WARNING", logger="pelab.data.eval_sets"):
        data = eval_sets.load_eval_set(task, "val", 8, 16, tmp_path)[:]
    assert "corrupt or partial" in caplog.text and path.name in caplog.text
    assert torch.equal(data["prompt"], expected["prompt"])
    assert torch.equal(data["answer"], expected["answer"])
    assert visible(tmp_path) == [path]
    caplog.clear()  # the rebuilt set is intact: read without a warning
    with caplog.at_level("WARNING", logger="pelab.data.eval_sets"):
        eval_sets.load_eval_set(task, "val", 8, 16, tmp_path)
    assert "corrupt" not in caplog.text


def _slow_build(log_path):
    build = eval_sets.build_eval_set

    def counted(*args):
        with open(log_path, "a") as f:
            f.write("built\n")
        time.sleep(0.5)  # widen the window in which other jobs look for the set
        return build(*args)

    return counted


def _load_in_child(cache_dir, log_path, queue, start):
    eval_sets.build_eval_set = _slow_build(log_path)
    start.wait()  # every job looks for the set at the same moment
    data = eval_sets.load_eval_set(copy_task(), "test", 8, 32, cache_dir)
    queue.put(data[:]["prompt"].tolist())


@pytest.mark.processes
@pytest.mark.integration
def test_concurrent_jobs_build_a_set_once_and_all_read_the_same_data(tmp_path):
    # fork (fast): the children only sample small tensors, which never enter torch's thread pool
    context = multiprocessing.get_context("fork")
    queue, start = context.Queue(), context.Barrier(4)
    log_path = tmp_path / "builds.log"
    cache = tmp_path / "cache"
    jobs = [
        context.Process(target=_load_in_child, args=(cache, log_path, queue, start))
        for _ in range(4)
    ]
    for job in jobs:
        job.start()
    prompts = [queue.get(timeout=120) for _ in jobs]
    for job in jobs:
        job.join(timeout=60)
        assert job.exitcode == 0
    expected = eval_sets.build_eval_set(copy_task(), "test", 8, 32)[:]["prompt"]
    assert all(p == expected for p in prompts)
    assert log_path.read_text().count("built") == 1
    (path,) = visible(cache)
    assert not [p for p in cache.iterdir() if ".tmp-" in p.name or ".corrupt-" in p.name]
