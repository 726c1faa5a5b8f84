"""Pid files of the agents a launcher started: who is alive, and what a following launcher adopts."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.orphans import Orphan, Proc, left_running, record


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait()


def ended() -> Proc:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    proc = Proc.of(process.pid)
    process.wait()
    return proc


def test_a_process_is_known_by_its_pid_and_start_time(sleeper: subprocess.Popen[bytes]) -> None:
    me = Proc.of(os.getpid())
    assert me.started is not None
    assert me.alive()
    assert not me.model_copy(update={"started": me.started + 1}).alive()  # the pid, reused by another
    assert not ended().alive()
    zombie = Proc.of(sleeper.pid)
    sleeper.kill()
    os.waitid(os.P_PID, sleeper.pid, os.WEXITED | os.WNOWAIT)  # ended, not yet reaped
    assert not zombie.alive()


def test_a_following_launcher_adopts_only_running_agents_of_launchers_that_ended(
    tmp_path: Path, sleeper: subprocess.Popen[bytes], caplog: pytest.LogCaptureFixture
) -> None:
    me, running, gone = Proc.of(os.getpid()), Proc.of(sleeper.pid), ended()

    def pid_file(name: str, adapter: Proc, launcher: Proc) -> Path:
        record(
            tmp_path / f"{name}.pid", Orphan(agent_id=name, group_id="g", adapter=adapter, launcher=launcher)
        )
        return tmp_path / f"{name}.pid"

    left = pid_file("left", running, gone)
    others = pid_file("others", running, running)  # its launcher still runs: not ours to count
    done = pid_file("done", gone, gone)
    (tmp_path / "junk.pid").write_text("12345\n")
    # pid 0 or -1 would signal a process group, or every process: not a pid file of an adapter
    for pid in (0, -1, 1):
        (tmp_path / f"group{pid}.pid").write_text(
            f'{{"agent_id": "x", "group_id": "g", "adapter": {{"pid": {pid}}}, "launcher": {{"pid": {pid}}}}}'
        )
    with caplog.at_level(logging.WARNING):
        found = left_running(tmp_path, me)
    assert list(found) == [left]
    assert found[left].launcher == me
    assert Orphan.model_validate_json(left.read_bytes()) == found[left]  # what a third launcher reads
    assert others.exists()
    assert not done.exists()
    assert "ignoring" in caplog.text and "junk.pid" in caplog.text
    assert all(f"group{pid}.pid" in caplog.text for pid in (0, -1, 1))
    assert left_running(tmp_path / "missing", me) == {}
