"""A pre-imported Python for the tests' command lines (issue 46): ``python <script> <args>``
costs ~7 s of imports here (torch, Lightning, Hydra, datasets) before the script's first
line, and the tests start dozens. The zygote, one per test process, imports those once and forks
a process per command, which then runs the script as ``python <script>`` would: as
``__main__``, with its own argv, working directory, environment (``PYTHONPATH`` on its
``sys.path``), stdin/stdout/stderr, Python's Ctrl-C (``KeyboardInterrupt``, even where the tests
run with SIGINT ignored), exit status (a signal's: negative) and exit handlers. What a fork
cannot give is a fresh import: a test of the start itself (``--help``'s lazy imports) starts a
real interpreter (``subprocess``).

``run`` and ``start`` mirror ``subprocess.run`` and ``subprocess.Popen`` for a script
(``[sys.executable, script, *args]``); ``PELAB_TESTS_NO_ZYGOTE=1`` sends them to ``subprocess``
instead, to show a test reads the same either way.

The zygote serves on a Unix socket: a command comes as JSON with its three file descriptors
(``socket.send_fds``); a waiter process forked for it forks the command's process, answers its
pid, waits for it and answers its exit status. The zygote reaps its waiters and runs nothing
but imports before a fork: no thread, no Hydra, no torch computation."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

# what a script of pelab imports, as the pool launcher's fork server preloads it; not W&B,
# whose import makes a temporary directory that the first forked process to end would remove
PRELOAD = (
    "torch",
    "lightning",
    "hydra",
    "datasets",
    "pandas",
    "pelab.train",
    "pelab.evaluate",
    "pelab.analysis.report",
    "hydra_plugins.pelab_launcher.worker",
    "hydra_plugins.pelab_launcher.pool_launcher",
)
NO_ZYGOTE = "PELAB_TESTS_NO_ZYGOTE"


def serve(path: str) -> dict[str, Any]:
    """The zygote's loop on the socket ``path``; returns only in a command's process, with its
    request."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    print("ready", flush=True)
    while True:
        connection, _ = listener.accept()
        message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
        if os.fork() == 0:  # the waiter
            listener.close()
            pid = os.fork()
            if pid == 0:  # the command's process
                connection.close()
                for fd, target in zip(fds, (0, 1, 2), strict=True):
                    os.dup2(fd, target)
                    os.close(fd)
                return json.loads(message)
            for fd in fds:
                os.close(fd)
            connection.sendall(f"{pid}\n".encode())
            _, status = os.waitpid(pid, 0)
            connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            os._exit(0)
        connection.close()
        for fd in fds:
            os.close(fd)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:  # the waiters that ended
                pass
        except ChildProcessError:
            pass


def search_path(env: dict[str, str]) -> list[str]:
    """``env``'s ``PYTHONPATH`` entries, as Python puts them on ``sys.path``."""
    return [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


def become(request: dict[str, Any], installed: list[str]) -> None:
    """This forked process becomes ``python <argv>`` in its directory and environment:
    ``sys.path`` is the script's directory, its ``PYTHONPATH`` and ``installed`` (the rest)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C: KeyboardInterrupt
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = list(request["argv"])
    script_dir = str(Path(sys.argv[0]).resolve().parent)
    sys.path[:] = [script_dir, *search_path(request["env"]), *installed]
    if request["env"].get("PYTHONUNBUFFERED"):  # the same stream objects: handlers hold them
        for stream in (sys.stdout, sys.stderr):
            stream.reconfigure(line_buffering=True, write_through=True)


class Zygote:
    """This test process's zygote, started at its first command."""

    started: Zygote | None = None

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="pelab-zygote-")
        self.path = os.path.join(self.directory, "socket")
        env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
        self.process = subprocess.Popen(  # as a module: tests/inspect is not the standard one
            [sys.executable, "-m", "tests.zygote", self.path],
            cwd=Path(__file__).resolve().parents[1],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
        )
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the tests' zygote did not start ({self.process.wait()})")
        atexit.register(self.stop)

    @classmethod
    def get(cls) -> Zygote:
        if cls.started is None or cls.started.process.poll() is not None:
            cls.started = cls()
        return cls.started

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)

    def spawn(self, argv: list[str], cwd: str, env: dict[str, str], fds: list[int]) -> Spawned:
        """``argv`` forked from the zygote, with ``fds`` as its stdin, stdout and stderr."""
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(self.path)
        request = {"argv": argv, "cwd": cwd, "env": env}
        socket.send_fds(connection, [json.dumps(request).encode()], fds)
        return Spawned(connection)


class Spawned:
    """A command's process forked by the zygote: what the tests use of ``subprocess.Popen``."""

    def __init__(self, connection: socket.socket) -> None:
        answers = connection.makefile("r")
        self.pid = int(answers.readline())
        self.returncode: int | None = None
        self.stdout = self.stderr = None
        self.ended = threading.Event()

        def read_status() -> None:
            line = answers.readline()  # empty: the waiter died with the zygote
            self.returncode = int(line) if line else -signal.SIGKILL
            connection.close()
            self.ended.set()

        threading.Thread(target=read_status, daemon=True).start()

    def wait(self, timeout: float | None = None) -> int:
        if not self.ended.wait(timeout):
            raise subprocess.TimeoutExpired(str(self.pid), timeout)
        return self.returncode

    def poll(self) -> int | None:
        return self.returncode if self.ended.is_set() else None

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str | None, str | None]:
        """Every line of its piped outputs, once it ended."""
        outputs: dict[str, str] = {}

        def read(name: str, stream: Any) -> None:
            outputs[name] = stream.read()
            stream.close()

        readers = [
            threading.Thread(target=read, args=(name, stream), daemon=True)
            for name, stream in (("stdout", self.stdout), ("stderr", self.stderr))
            if stream is not None
        ]
        for reader in readers:
            reader.start()
        self.wait(timeout)
        for reader in readers:
            reader.join()
        return outputs.get("stdout"), outputs.get("stderr")


def start(
    argv: list[str],
    *,
    cwd: str | Path,
    env: dict[str, str],
    stdout: int | None = None,
    stderr: int | None = None,
    fresh: bool = False,
) -> Spawned | subprocess.Popen:
    """``subprocess.Popen([sys.executable, *argv], ...)`` of a script, forked from the zygote:
    stdin closed, ``stdout`` and ``stderr`` each ``subprocess.PIPE``, ``DEVNULL`` or inherited
    (None) (``stderr`` also ``STDOUT``), text. ``fresh``: a new interpreter (a test of what
    happens while the script imports)."""
    if fresh or os.environ.get(NO_ZYGOTE) == "1":
        return subprocess.Popen(
            [sys.executable, *map(str, argv)],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # Python's, then
        )
    ends, mine, ours = [os.open(os.devnull, os.O_RDONLY)], {}, []
    for name, wanted, fd in (("stdout", stdout, 1), ("stderr", stderr, 2)):
        if wanted == subprocess.STDOUT:
            ends.append(ends[1])
        elif wanted == subprocess.PIPE:
            read, write = os.pipe()
            mine[name] = os.fdopen(read, "r")
            ends.append(write)
            ours.append(write)
        elif wanted == subprocess.DEVNULL:
            ends.append(os.open(os.devnull, os.O_WRONLY))
            ours.append(ends[-1])
        else:
            ends.append(fd)
    ours.append(ends[0])
    try:
        spawned = Zygote.get().spawn([str(a) for a in argv], str(cwd), dict(env), ends)
    finally:
        for fd in ours:
            os.close(fd)
    spawned.stdout, spawned.stderr = mine.get("stdout"), mine.get("stderr")
    return spawned


def run(
    argv: list[str],
    *,
    cwd: str | Path,
    env: dict[str, str],
    timeout: float | None = None,
    fresh: bool = False,
) -> subprocess.CompletedProcess:
    """``subprocess.run([sys.executable, *argv], capture_output=True, text=True, ...)`` of a
    script, forked from the zygote (``fresh``: a new interpreter, ``argv`` may then begin with
    its options); on ``timeout`` it is killed and ``TimeoutExpired`` raised."""
    piped = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    process = start(argv, cwd=cwd, env=env, fresh=fresh, **piped)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return subprocess.CompletedProcess([sys.executable, *argv], process.returncode, out, err)


if __name__ == "__main__":
    import runpy

    own = {sys.path[0], *search_path(dict(os.environ))}  # the repository's root, PYTHONPATH
    installed = [p for p in sys.path if p not in own]
    become(serve(sys.argv[1]), installed)
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except KeyboardInterrupt:  # as ``python <script>`` ends on it (``-m`` would exit 1)
        sys.excepthook(*sys.exc_info())
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
