"""pelab.errors: a disk that refuses a write is named, with what to do, wherever torch or
Lightning wrapped the OS error."""

import errno
import shutil
from types import SimpleNamespace

from pelab.errors import _free, causes, storage_fault
from pelab.record import failure_reason


def _wrapped(os_error: OSError) -> RuntimeError:
    """What torch raises when a checkpoint's write fails: its own error, the OS's as context."""
    try:
        try:
            raise os_error
        except OSError:  # implicit chaining (__context__), as torch's C++ error has
            raise RuntimeError("[enforce fail at inline_container.cc:672]")  # noqa: B904
    except RuntimeError as error:
        return error


def test_a_full_disk_is_named_with_the_file_the_free_space_and_the_remedy(tmp_path):
    error = _wrapped(OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "x.ckpt")))
    message = storage_fault(error)
    assert message.startswith(f"cannot write {tmp_path / 'x.ckpt'}: no space left on device")
    assert " free there. Free space or choose another output directory" in message
    assert failure_reason(error) == message  # what results.json records


def test_a_read_only_directory_is_named_and_other_errors_are_not_storage_faults(tmp_path):
    error = _wrapped(OSError(errno.EROFS, "Read-only file system", str(tmp_path)))
    assert storage_fault(error).startswith(f"cannot write {tmp_path}: read-only file system. Ch")
    assert storage_fault(RuntimeError("a bug")) is None
    assert storage_fault(FileNotFoundError(errno.ENOENT, "missing")) is None
    assert failure_reason(ValueError("bad")) == "ValueError: bad"


def test_causes_walks_each_error_once():
    first = ValueError("first")
    second = RuntimeError("second")
    second.__cause__ = first
    first.__context__ = second  # a cycle
    assert list(causes(second)) == [second, first]


def test_free_space_is_given_in_the_largest_unit_below_1024(monkeypatch, tmp_path):
    for free, text in ((512, "512 B"), (40 * 1024, "40.0 KiB"), (3 * 2**30, "3.0 GiB")):
        monkeypatch.setattr(shutil, "disk_usage", lambda path, f=free: SimpleNamespace(free=f))
        assert _free(str(tmp_path)) == text
    monkeypatch.setattr(shutil, "disk_usage", lambda path: SimpleNamespace(free=5 * 2**40))
    assert _free(str(tmp_path)) == "5120.0 GiB"
