"""A job that ended without recording its end (killed, out of memory, cancelled), recorded by its
launcher: every ``results.json`` of its directory (the job's, and each member's in a stack) still
``running`` says how it ended, why and how to resume; finished ones are left as they are
(``mark_unrecorded``, the one writer). The parallel launcher records a dead process ``failed``
(``mark_failed``); the submitit launchers a job that ended without a result ``interrupted``
(``mark_interrupted``)."""

from pathlib import Path
from typing import Any

RESUME_HERE = "re-run the same command (skip_completed=true) to resume from its last checkpoint"


def mark_unrecorded(
    job_dir: Path, status: str, error: str, **fields: Any
) -> tuple[list[Path], list[Path]]:
    """Every ``results.json`` of ``job_dir`` still ``running``, now ``status`` with ``error`` and
    ``fields``. Returns every record found there, and those it marked."""
    from pelab.record import RESULTS, RUNNING, read_record, write_json_atomic

    found = sorted(job_dir.rglob(RESULTS)) if job_dir.is_dir() else []
    marked = []
    for path in found:
        record = read_record(path)
        if record.get("status") != RUNNING:
            continue
        record.update(status=status, error=error, **fields)
        write_json_atomic(path.resolve(), record)
        marked.append(path)
    return found, marked


def mark_failed(output_dir: Path, reason: str, log_path: Path, tail: list[str]) -> bool:
    """A parallel sweep's job whose process died: ``failed``, why, how to resume and where its
    output is, with the output's last lines (``log_tail``). Returns whether there was a record
    to update."""
    from pelab.record import FAILED

    error = f"{reason}; {RESUME_HERE}; output: {log_path}"
    found, _ = mark_unrecorded(output_dir, FAILED, error, log_tail=tail)
    return bool(found)


def mark_interrupted(
    job_dir: Path, reason: str, resume: str, output: Any = None, interrupted: bool = True
) -> list[Path]:
    """A submitit job that ended without a result: ``interrupted`` (``failed`` when not
    ``interrupted``), why, the command that resumes it (also as ``resume_command``), and the
    job's log. Returns the records marked."""
    from pelab.record import FAILED, INTERRUPTED

    log_note = f"; output: {output}" if output else ""
    status = INTERRUPTED if interrupted else FAILED
    _, marked = mark_unrecorded(
        job_dir, status, f"{reason}; resume: {resume}{log_note}", resume_command=resume
    )
    return marked
