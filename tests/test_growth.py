"""Adding an encoding or a task adds a constant amount of test time (issue 27): the suite is
collected as it is and with one more task and one more encoding registered
(``tests/growth_plugin.py``), and the tests that appear are counted per test function."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from pelab.model_kinds import MODEL_KINDS
from tests.growth_plugin import NEW_PE, NEW_TASK

# The most tests one test function may gain from one new registry entry: a task's setting in
# every model kind (test_tasks.py's one-batch checks; each variant of a task is one more
# setting). A function parametrized over a registry x another registry would gain one test per
# entry of the other (>= 20 today): it fails here.
MOST_PER_FUNCTION = len(MODEL_KINDS)


def collect(repo_root: Path, out: Path, register: bool) -> subprocess.Popen:
    env = {**os.environ, "PELAB_GROWTH_OUT": str(out), "PELAB_GROWTH_REGISTER": str(int(register))}
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    command += ["-p", "tests.growth_plugin", "-m", "not slow", "tests"]
    return subprocess.Popen(
        command,
        cwd=repo_root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.processes
@pytest.mark.integration
def test_a_new_task_or_encoding_adds_a_few_unit_tests_and_no_run(tmp_path, repo_root):
    """Registered, a new task and a new encoding add tests only through the parametrizations
    over the registries: at most ``MOST_PER_FUNCTION`` per test function, none of them
    ``integration`` (no process, no Trainer run: tests/conftest.py holds every other test to
    that), and none that pairs the new task with the new encoding."""
    outs = {register: tmp_path / f"items_{register}.json" for register in (False, True)}
    procs = {register: collect(repo_root, out, register) for register, out in outs.items()}
    for proc in procs.values():
        output, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, output[-3000:]
    before, after = (json.loads(outs[r].read_text()) for r in (False, True))
    added = [item for item in after if item["nodeid"] not in {i["nodeid"] for i in before}]
    per_function = Counter(item["function"] for item in after) - Counter(
        item["function"] for item in before
    )
    assert added and sum(per_function.values()) == len(added)
    assert any(NEW_TASK in item["nodeid"] for item in added)  # the registration took effect
    assert any(NEW_PE in item["nodeid"] for item in added)
    too_many = {f: n for f, n in per_function.items() if n > MOST_PER_FUNCTION}
    assert not too_many, f"a new registry entry multiplies these tests: {too_many}"
    runs = [item["nodeid"] for item in added if "integration" in item["markers"]]
    assert not runs, f"a new registry entry adds processes or Trainer runs: {runs}"
    both = [
        item["nodeid"] for item in added if NEW_TASK in item["nodeid"] and NEW_PE in item["nodeid"]
    ]
    assert not both
    print(f"\na new task and a new encoding add {len(added)} unit tests: {dict(per_function)}")
