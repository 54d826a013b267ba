"""Tasks. Importing this package registers every task by name."""

from pelab.tasks import copy, reverse, sort  # noqa: F401  (registration side effect)
from pelab.tasks.base import BLANK, BOS, N_SPECIAL, SEP, TASK_REGISTRY, Task, register_task

__all__ = ["BLANK", "BOS", "N_SPECIAL", "SEP", "TASK_REGISTRY", "Task", "register_task"]
