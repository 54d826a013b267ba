"""Tasks. Importing this package imports every module in it, which registers each task by name
(``@register_task``): a new task is one new module, nothing else."""

import importlib
import pkgutil

from pelab.tasks.base import TASK_REGISTRY, Task, register_task

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["TASK_REGISTRY", "Task", "register_task"]
