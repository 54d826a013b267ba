"""A pytest plugin for ``tests/test_growth.py``: with ``PELAB_GROWTH_REGISTER=1``,
``-p tests.growth_plugin`` registers one more task and one more encoding before the test modules
are collected; with ``PELAB_GROWTH_OUT=<file>`` it writes each selected test's id, function and
markers there as JSON."""

from __future__ import annotations

import json
import os

import pytest

from pelab.pe import PE_REGISTRY, register_pe
from pelab.tasks import TASK_REGISTRY, register_task

NEW_TASK, NEW_PE = "zz_new_task", "zz_new_pe"

if os.environ.get("PELAB_GROWTH_REGISTER") == "1":
    # no variants: each variant is one more setting of the task's own tests
    register_task(NEW_TASK)(type("NewTask", (TASK_REGISTRY["copy"],), {"variants": ()}))
    register_pe(NEW_PE)(type("NewPE", (PE_REGISTRY["rope"],), {}))


def pytest_collection_finish(session: pytest.Session) -> None:
    out = os.environ.get("PELAB_GROWTH_OUT")
    if out:
        items = [
            {
                "nodeid": item.nodeid,
                "function": item.nodeid.split("[")[0],
                "markers": sorted({m.name for m in item.iter_markers()}),
            }
            for item in session.items
        ]
        with open(out, "w") as f:
            json.dump(items, f)
