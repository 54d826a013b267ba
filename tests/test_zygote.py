"""The tests' pre-imported Python (``tests.zygote``) runs a script as a fresh ``python <script>``
does: the same argv, directory, environment, ``sys.path``, output, Ctrl-C, exit statuses."""

import json
import os
import signal
import subprocess
import time

import pytest

from tests import zygote

PROBE = """
import json, os, signal, sys, time
what = sys.argv[1]
if what == "state":
    print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "env": os.environ.get("PROBE"),
                      "path0": sys.path[0], "extra": os.environ["PYTHONPATH"] in sys.path,
                      "main": __name__, "stdin": sys.stdin.read()}))
    print("to stderr", file=sys.stderr)
elif what == "exit":
    sys.exit(int(sys.argv[2]))
elif what == "raise":
    raise ValueError("boom")
elif what == "signal":
    os.kill(os.getpid(), signal.SIGUSR1)
elif what == "wait":
    import atexit
    atexit.register(lambda: print("exit handler ran", flush=True))
    print("waiting", flush=True)
    try:
        time.sleep(60)
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)
        raise
"""


@pytest.fixture
def probe(tmp_path):
    script = tmp_path / "scripts" / "probe.py"
    script.parent.mkdir()
    script.write_text(PROBE)
    return script


def both(monkeypatch, call):
    """``call()`` forked from the zygote, then in a fresh interpreter."""
    forked = call()
    monkeypatch.setenv(zygote.NO_ZYGOTE, "1")
    fresh = call()
    monkeypatch.delenv(zygote.NO_ZYGOTE)
    return forked, fresh


@pytest.mark.processes
@pytest.mark.integration
@pytest.mark.parametrize(
    "args", [["state", "x y"], ["exit", "3"], ["raise"], ["signal"]], ids=lambda a: a[0]
)
def test_a_forked_script_reads_and_ends_as_a_fresh_one(probe, tmp_path, monkeypatch, args):
    env = {**os.environ, "PROBE": "here", "PYTHONPATH": str(tmp_path)}
    forked, fresh = both(
        monkeypatch,
        lambda: zygote.run([str(probe), *args], cwd=tmp_path, env=env, timeout=60),
    )
    assert forked.returncode == fresh.returncode
    assert forked.stdout == fresh.stdout
    if args[0] == "raise":  # the same traceback's last line
        assert forked.stderr.splitlines()[-1] == fresh.stderr.splitlines()[-1]
    else:
        assert forked.stderr == fresh.stderr
    expected = {"state": 0, "exit": 3, "raise": 1, "signal": -signal.SIGUSR1}[args[0]]
    assert forked.returncode == expected
    if args[0] == "state":
        state = json.loads(forked.stdout)
        assert (state["argv"], state["main"], state["env"]) == (
            ["state", "x y"],
            "__main__",
            "here",
        )
        assert (state["path0"], state["cwd"]) == (str(probe.parent), str(tmp_path))
        assert state["extra"] and state["stdin"] == ""  # PYTHONPATH on sys.path; stdin closed


@pytest.mark.processes
@pytest.mark.integration
def test_ctrl_c_raises_keyboard_interrupt_and_the_exit_handlers_run(probe, tmp_path, monkeypatch):
    def interrupted():
        process = zygote.start(
            [str(probe), "wait"],
            cwd=tmp_path,
            env=dict(os.environ),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert process.stdout.readline() == "waiting\n"
        time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=60)
        return process.returncode, out

    forked, fresh = both(monkeypatch, interrupted)
    assert forked == fresh == (-signal.SIGINT, "KeyboardInterrupt\nexit handler ran\n")


@pytest.mark.processes
@pytest.mark.integration
def test_a_command_past_its_timeout_is_killed(probe, tmp_path):
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.run([str(probe), "wait"], cwd=tmp_path, env=dict(os.environ), timeout=1)
    assert time.monotonic() - start < 30
    again = zygote.run([str(probe), "exit", "0"], cwd=tmp_path, env=dict(os.environ), timeout=60)
    assert again.returncode == 0
