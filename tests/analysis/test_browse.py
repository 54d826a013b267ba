"""``make_table.py <dirs> --list``: one line per job, the columns a researcher looks for."""

from pelab.analysis.browse import run_list
from pelab.analysis.report import main
from tests.analysis.records import CHOICES, record, write_job


def job(tmp_path, name, pe, task, seed, learned, started, member_of=None):
    rec = record(pe, task, seed, {8: 1.0, 32: 0.25}, learned=learned) | {"job_type": "train"}
    rec |= {"started": started, "wall_time_s": 61.0}
    if member_of is not None:
        rec["member_of"] = member_of
    return rec


def test_a_stack_is_one_line_with_its_seeds_and_how_many_learned(tmp_path):
    stack = {"seeds": [0, 1], "learning_rates": None, "dir": "x", "fit_time_s": 90.0}
    records = [
        job(tmp_path, "a", "rope", "copy", 0, True, "2026-11-24T10:00:00+00:00", stack),
        job(tmp_path, "a", "rope", "copy", 1, False, "2026-11-24T10:00:00+00:00", stack),
        job(tmp_path, "b", "alibi", "sort", 0, None, "2026-11-25T09:30:00+00:00"),
    ]
    records[0] |= {"git_commit": "abc1234567", "git_dirty": True}  # the code differed from it
    for r, where in zip(records, ("/l/a/seed_0", "/l/a/seed_1", "/l/b"), strict=True):
        r["source"], r["job"] = where, where if "seed" not in where else "/l/a"
    lines = run_list(records).splitlines()
    assert lines[0].split() == [
        "date",
        "pe",
        "task",
        "seeds",
        "learned",
        "ID",
        "OOD",
        "wall",
        "code",
        "path",
    ]
    assert lines[2].split() == [  # newest first: the stack started a day earlier
        "2026-11-24",
        "10:00",
        "rope",
        "copy",
        "0,1",
        "1/2",
        "100.0",
        "25.0",
        "1.5",
        "min",
        "abc1234+dirty",
        "/l/a",
    ]
    assert lines[1].split()[2:7] == ["alibi", "sort", "0", "-", "100.0"]


def test_list_prints_the_runs_with_the_filters_and_writes_nothing(tmp_path, capsys):
    for i, (pe, task) in enumerate((("rope", "copy"), ("alibi", "sort"))):
        rec = job(tmp_path, str(i), pe, task, 0, True, f"2026-11-2{i}T10:00:00+00:00")
        write_job(tmp_path / str(i), rec, {"pe": pe, "task": task, **CHOICES}, 0, [f"pe={pe}"])
    assert main([str(tmp_path), "--list", "--filter", "task=sort"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and "alibi" in out[1] and "rope" not in "".join(out)
    assert not (tmp_path / "summary").exists()
