"""The mark of a start (agents.launch_marks), with real processes and real locks; and launchers killed with
SIGKILL at the start's every step, whose restart starts each agent once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from adapter_kit import exited, open_bus, spawn, start, wait_until
from test_launch_stops import _mark
from test_launcher import GROUP, launcher_args, request, template

from agents import launch_marks
from agents.launch_marks import Mark
from bus.envelope import EnvelopeType
from bus.keys import StreamKind, dead_stream_for

_ADAPTER = (
    "import os, sys; from agents.launch_marks import adapter_started; adapter_started({fd}); sys.stdin.read()"
)
"""An adapter that says started through the mark it inherited, then runs until its stdin closes."""


def test_a_mark_says_starting_while_held_and_nothing_once_let_go_unsaid(tmp_path: Path) -> None:
    mark = tmp_path / "r.started"
    assert launch_marks.read(mark) is Mark.NONE
    held = launch_marks.begin(mark)
    assert held is not None
    assert launch_marks.read(mark) is Mark.STARTING  # the launcher holds it while it starts the adapter
    os.close(held)  # killed before the start
    assert launch_marks.read(mark) is Mark.NONE
    assert [p.name for p in tmp_path.iterdir()] == ["r.started"]  # made in one step: no partial left


def test_a_mark_an_adapter_inherited_says_starting_until_the_adapter_says_started(tmp_path: Path) -> None:
    mark = tmp_path / "r.started"
    held = launch_marks.begin(mark)
    assert held is not None
    silent = subprocess.Popen(  # an adapter that has not said it started yet
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, pass_fds=(held,)
    )
    os.close(held)  # the launcher, killed before it wrote the mark
    try:
        assert launch_marks.read(mark) is Mark.STARTING
    finally:
        silent.communicate(b"", timeout=30)
    assert launch_marks.read(mark) is Mark.NONE  # it ended without saying so: no agent ran

    held = launch_marks.begin(mark)
    assert held is not None
    adapter = subprocess.Popen(
        [sys.executable, "-c", _ADAPTER.format(fd=held)], stdin=subprocess.PIPE, pass_fds=(held,)
    )
    os.close(held)
    try:
        assert adapter.stdin is not None
        adapter.stdin.write(b"x")  # no more than a round trip: it says started first
        adapter.stdin.flush()
    finally:
        adapter.communicate(b"", timeout=30)
    assert adapter.returncode == 0
    assert launch_marks.read(mark) is Mark.STARTED  # ended, but it said so


def test_what_the_launcher_writes_and_what_earlier_versions_left_say_started(tmp_path: Path) -> None:
    mark = tmp_path / "r.started"
    held = launch_marks.begin(mark)
    assert held is not None
    launch_marks.started(held)
    assert launch_marks.read(mark) is Mark.STARTED  # even while held
    os.close(held)
    assert launch_marks.read(mark) is Mark.STARTED
    mark.write_bytes(b"")  # an earlier version's mark
    assert launch_marks.read(mark) is Mark.STARTED
    failed = launch_marks.begin(tmp_path / "f.started")
    assert failed is not None
    launch_marks.abandon(tmp_path / "f.started", failed)  # the start failed
    assert launch_marks.read(tmp_path / "f.started") is Mark.NONE


def test_an_adapter_refuses_a_descriptor_that_is_no_mark(tmp_path: Path) -> None:
    other = tmp_path / "notes.md"
    other.write_text("the agent's notes, which must not be written over\n")
    fd = os.open(other, os.O_WRONLY)
    try:
        with pytest.raises(ValueError, match="not a launch mark"):
            launch_marks.adapter_started(fd)
    finally:
        os.close(fd)
    assert other.read_text() == "the agent's notes, which must not be written over\n"
    with pytest.raises(ValueError, match="not open"):
        launch_marks.adapter_started(fd)


_KILLS = {
    # the mark made, the adapter not started
    "before-the-start": (
        "original = launch_marks.begin\n"
        "def begin(mark):\n"
        "    original(mark)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "launch_marks.begin = begin\n"
    ),
    # the adapter started, the mark not written
    "after-the-start": (
        "def started(fd):\n    os.kill(os.getpid(), signal.SIGKILL)\nlaunch_marks.started = started\n"
    ),
}


def _killed_launcher(step: str) -> str:
    """``subagent-bus``, killing itself with SIGKILL at ``step`` of a start."""
    return (
        "import os, signal, sys\n"
        "from agents import launch_marks\n"
        f"{_KILLS[step]}"
        "from bus.entry import main\n"
        "sys.argv[0] = 'subagent-bus'\n"
        "main()\n"
    )


@pytest.mark.parametrize(
    ("step", "adapter_ended"),
    [("before-the-start", False), ("after-the-start", False), ("after-the-start", True)],
    ids=["killed-before-the-start", "killed-after-the-start", "killed-after-the-start-adapter-ended"],
)
async def test_a_launcher_killed_at_any_step_of_a_start_has_its_agent_started_once(
    redis_url: str, tmp_path: Path, step: str, adapter_ended: bool
) -> None:
    """A launcher process killed with SIGKILL after it made the mark and before it started the adapter, or
    after it started the adapter and before it wrote the mark: its restart on the same log directory
    starts the agent (the first case) or does not (the others), also once the first adapter ended; one
    still running it adopts (counted against --max-parallel, stopped with it)."""
    go, log = tmp_path / "go", tmp_path / "launcher.log"
    if adapter_ended:
        go.touch()
    tpl = template(f"wait-file:{go}", "complete")
    async with open_bus(redis_url) as bus:
        agent = await request(bus, 1)
        args = launcher_args(tmp_path, tpl, "--reclaim-ms", "100", "--name", "the-launcher")
        code = _killed_launcher(step)
        env = {**os.environ, "SUBAGENT_BUS_REDIS_URL": redis_url}
        first = spawn([sys.executable, "-c", code, *args], stderr=log.open("ab"), env=env)
        assert await exited(first, 60) == -signal.SIGKILL, log.read_text()
        mark = _mark(tmp_path, GROUP, "req-1", agent)
        if step == "before-the-start":
            assert launch_marks.read(mark) is Mark.NONE
        if adapter_ended:  # then the mark says started: the adapter said so, its launcher could not

            async def completed() -> bool:
                return await bus.has(GROUP, EnvelopeType.COMPLETION_REPORT)

            await wait_until(completed, 60, "the first adapter's agent to complete")
            assert launch_marks.read(mark) is Mark.STARTED
        second = start([*args, "--burst"], redis_url, log)
        if step == "after-the-start" and not adapter_ended:  # its pid file was written before the mark

            async def adopted() -> bool:
                return f"adopted {agent}" in log.read_text()

            await wait_until(adopted, 60, "the restart to adopt the agent the killed launcher left running")
        go.touch()
        assert await exited(second, 90) == 0, log.read_text()

        async def completed_once() -> bool:  # the first launcher's agent, if any, outlives it
            return await bus.count(GROUP, EnvelopeType.COMPLETION_REPORT) == 1

        await wait_until(completed_once, 60, "the agent to complete")
        started = [e.agent_id for e in await bus.of_type(GROUP, EnvelopeType.AGENT_STARTED)]
        assert started == [agent], log.read_text()
        tasks = bus.stream(GROUP, StreamKind.TASKS)
        assert (await bus.client.xpending(tasks, "launchers"))["pending"] == 0
        assert await bus.client.xlen(dead_stream_for(tasks)) == 0
    assert not mark.exists()
