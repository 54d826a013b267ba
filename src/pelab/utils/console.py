"""What a run's console shows: pelab's and Hydra's lines, warnings, the table and the learned
line. Third-party chatter (Lightning's info and hints, known deprecation warnings) goes to the
run's log file only (``<run dir>/<script>.log``, Hydra's file handler), and progress bars are off
when the output is not a terminal (``\\r`` would make a piped log one line): plain lines say the
progress there (``pelab.utils.plain_progress``), in the durations of ``duration``."""

from __future__ import annotations

import logging
import sys

# loggers whose INFO lines reach the console; every other logger's reach it from WARNING up
CONSOLE_LOGGERS = ("pelab", "hydra", "__main__", "scripts")
# third-party warnings that say nothing about this run: the log file only
NOISE = (
    "`srun` command is available",  # Lightning on a machine with SLURM installed
    "litlogger",  # Lightning's advertisement
    "LeafSpec",  # a deprecation inside Lightning
    "callbacks used to create the checkpoint",  # each member's best checkpoint, by design
    "does not have many workers",  # in-memory data: workers would only cost
    "smaller than the logging interval",  # a short test run
)
# third-party loggers that write to the console themselves: through the root's handlers instead
LIGHTNING_LOGGERS = (
    "lightning",
    "lightning.pytorch",
    "lightning.fabric",
    "lightning_fabric",
    "pytorch_lightning",
    "torchmetrics",
)


class ConsoleFilter(logging.Filter):
    """Lets through the console's lines: see the module docstring."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.split(".")[0] in CONSOLE_LOGGERS:
            return True
        if record.levelno < logging.WARNING:
            return False
        message = record.getMessage()
        return not any(noise in message for noise in NOISE)


def is_console(handler: logging.Handler) -> bool:
    """A handler that writes to the process's stdout or stderr (not a file, not pytest's)."""
    streams = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
    kind = type(handler) is logging.StreamHandler
    return kind and getattr(handler, "stream", None) in streams


def route_console() -> None:
    """Once Hydra has configured logging (the root logger writes to the console and a file):
    Python warnings become log records, Lightning's loggers write through the root's handlers
    instead of their own stream, and the console handlers get ``ConsoleFilter``. Outside a
    Hydra app (a notebook) nothing changes."""
    root = logging.getLogger()
    consoles = [h for h in root.handlers if is_console(h)]
    if not consoles or not any(isinstance(h, logging.FileHandler) for h in root.handlers):
        return
    logging.captureWarnings(True)
    for name in LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        for handler in [h for h in logger.handlers if is_console(h)]:
            logger.removeHandler(handler)
        logger.propagate = True
    for handler in consoles:
        if not any(isinstance(f, ConsoleFilter) for f in handler.filters):
            handler.addFilter(ConsoleFilter())


def interactive() -> bool:
    """Whether the console is a terminal (progress bars redraw a line; a pipe keeps each)."""
    return sys.stdout.isatty()


def count(n: int, noun: str) -> str:
    """``1 job``, ``3 jobs``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def duration(seconds: float) -> str:
    """A time left or taken, as a console line says it: ``45 s``, ``9 min``, ``2 h 5 min``."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"
