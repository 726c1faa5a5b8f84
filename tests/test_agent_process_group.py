"""The signals that stop an agent reach the processes it started too: an agent behind a wrapper (a shell
script, ``npx``, ``uv run``) is stopped, not only the wrapper. Real processes, real Redis, real signals."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from adapter_kit import exited, start, wait_until

from agents import agent_process
from agents.agent_process import start_agent, stop_agent
from agents.delivery_command import Stopping, run_command

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")

_CHILD = """
import os, signal, sys, time
if sys.argv[2] == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[1] + ".tmp", "w") as pid:
    pid.write(str(os.getpid()))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""


def _wrapper(pid_file: Path, *, ignoring: bool = False, child_ignoring: bool = False) -> list[str]:
    """A shell script that starts a long-sleeping child, which writes its pid to ``pid_file``, and waits
    for it; ``ignoring``: both ignore SIGTERM; ``child_ignoring``: the child alone does."""
    ignores = ignoring or child_ignoring
    child = shlex.join([sys.executable, "-c", _CHILD, str(pid_file), "ignore" if ignores else "default"])
    trap = "trap '' TERM\n" if ignoring else ""
    return ["sh", "-c", f"{trap}{child} &\nwait\n"]


def _gone(pid: int) -> bool:
    """Whether a process that is not our child has ended: no such pid, or a zombie not reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


@contextlib.contextmanager
def _killed_after(pid_file: Path) -> Iterator[None]:
    """The child is killed when the test ends, however it ends: a failed test leaves no process behind."""
    try:
        yield
    finally:
        pid = _pid(pid_file)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _pid(pid_file: Path) -> int | None:
    """The child's pid, once it has written it (whole: it is renamed into place)."""
    try:
        return int(pid_file.read_text())
    except FileNotFoundError:
        return None


async def _child_of(pid_file: Path) -> int:
    async def written() -> bool:
        return _pid(pid_file) is not None

    await wait_until(written, 20, "the child to write its pid")
    pid = _pid(pid_file)
    assert pid is not None
    return pid


async def _ends(pid: int) -> None:
    async def gone() -> bool:
        return _gone(pid)

    await wait_until(gone, 10, f"the child {pid} to end")


async def test_sigterm_to_the_adapter_stops_what_the_agent_started(redis_url: str, tmp_path: Path) -> None:
    log, pid_file = tmp_path / "adapter.log", tmp_path / "child.pid"
    args = ["adapter", "run", "--agent-id", "pg1", "--group", "g-pg", "--", *_wrapper(pid_file)]
    with _killed_after(pid_file):
        adapter = start(args, redis_url, log)
        child = await _child_of(pid_file)
        adapter.send_signal(signal.SIGTERM)
        assert await exited(adapter, 20) == 128 + signal.SIGTERM, log.read_text()
        await _ends(child)


@pytest.mark.parametrize(
    ("ignoring", "exit_signal", "warned"),
    [
        ("both", signal.SIGKILL, "the agent did not exit within 0.5s of SIGTERM: killed"),
        # the wrapper ends at SIGTERM: the SIGKILL after the grace went only to a wrapper still running
        ("child", signal.SIGTERM, "a process the agent started did not exit within 0.5s of SIGTERM: killed"),
    ],
)
async def test_sigkill_after_the_grace_stops_what_the_agent_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ignoring: str, exit_signal: int, warned: str
) -> None:
    monkeypatch.setattr(agent_process, "STOP_GRACE_S", 0.5)  # the grace itself is not what is tested
    pid_file, warnings = tmp_path / "child.pid", list[str]()
    wrapper = _wrapper(pid_file, ignoring=ignoring == "both", child_ignoring=ignoring == "child")
    with _killed_after(pid_file):
        process = await start_agent(wrapper)
        try:
            child = await _child_of(pid_file)
            await asyncio.wait_for(stop_agent(process, termed=False, warn=warnings.append), 20)
            assert process.returncode == -exit_signal
            await _ends(child)
            assert warnings == [warned]
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


async def test_a_stop_signal_passed_on_to_a_resume_command_stops_what_it_started(tmp_path: Path) -> None:
    pid_file, stopping, logged = tmp_path / "child.pid", Stopping(), list[str]()
    with _killed_after(pid_file):
        command = asyncio.create_task(run_command(_wrapper(pid_file), logged.append, stopping=stopping))
        try:
            child = await _child_of(pid_file)
            stopping.forward(signal.SIGTERM)
            code, _ = await asyncio.wait_for(command, 20)
            assert code == -signal.SIGTERM
            await _ends(child)
        finally:
            command.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await command
