"""The console script: a Ctrl-C during its imports ends it quietly, like one while it runs."""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
from pathlib import Path

from bus.entry import EXIT_INTERRUPTED

# `bus.cli` made slow to import, as it is on a loaded machine: its import says so and waits for a signal
_SLOW_CLI = """
import importlib.abc, sys, time

class Slow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "bus.cli":
            print("importing", flush=True)
            time.sleep(60)
        return None

sys.meta_path.insert(0, Slow())
from bus.entry import main
main()
"""


def test_ctrl_c_during_the_imports_ends_the_command_without_a_traceback() -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", _SLOW_CLI, "status"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == b"importing\n"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
        assert (process.returncode, out, err) == (EXIT_INTERRUPTED, b"", b"\n")
    finally:
        if process.poll() is None:
            process.kill()


def test_an_ignored_ctrl_c_stays_ignored(tmp_path: Path) -> None:
    """A command started with SIGINT ignored (a shell's background job, `trap '' INT`) is not ended by
    one during its imports either."""
    go = tmp_path / "go"
    slow = _SLOW_CLI.replace("time.sleep(60)", f"while not os.path.exists({str(go)!r}): time.sleep(0.01)")
    script = tmp_path / "slow.py"
    script.write_text(slow.replace("import importlib.abc,", "import importlib.abc, os,"))
    command = f"trap '' INT; exec {shlex.quote(sys.executable)} {shlex.quote(str(script))} --version"
    process = subprocess.Popen(["sh", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == b"importing\n"
        process.send_signal(signal.SIGINT)
        go.touch()
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        assert b"version" in out
    finally:
        if process.poll() is None:
            process.kill()
