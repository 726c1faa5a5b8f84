"""`adapter watch` where an output ends: the ``--pid`` process exits, the file is rotated, truncated,
renamed while the adapter was away, or its path stops naming a file. What the agent wrote is read to its
end and what the output leaves open is published, never dropped."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from adapter_kit import open_bus, spawn, wait_until

from agents.adapter import AgentBus, connect_bus
from agents.watch import FileWatch, WatchOptions
from bus.envelope import EnvelopeType
from bus.settings import Settings

T = EnvelopeType
GROUP = "g-ends"
PROGRESS = "[PROGRESS]\nagent_id: {}\npercent: {}\n[/PROGRESS]\n"
COMPLETION = "[COMPLETION_REPORT]\nagent_id: {}\nstatus: success\nsummary: done\n[/COMPLETION_REPORT]\n"
REPORT = "## Tester Result\n\n### Status\nSUCCESS\n\n### Summary\nAll good.\n"


@asynccontextmanager
async def watching(
    redis_url: str, agent: str, options: WatchOptions, at_the_end: Callable[[], None] | None = None
) -> AsyncIterator[tuple[asyncio.Task[bool], asyncio.Event, AgentBus]]:
    """A FileWatch of ``options`` running; ``at_the_end`` runs once, after the watch has read to the end
    of the file and flushed (before it looks for a new file or the process's end), once armed by
    setting the event yielded."""
    bus = await connect_bus(Settings.from_url(redis_url), agent, GROUP)
    stop, armed = asyncio.Event(), asyncio.Event()
    flush = bus.flush

    async def flushed() -> None:
        await flush()
        if armed.is_set() and at_the_end is not None:
            armed.clear()
            at_the_end()

    bus.flush = flushed  # type: ignore[method-assign]
    task = asyncio.create_task(FileWatch(bus, options, stop).run())
    try:
        yield task, armed, bus
    finally:
        stop.set()
        await task
        await bus.client.aclose()


async def published(redis_url: str) -> list[EnvelopeType]:
    async with open_bus(redis_url) as reader:
        return [e.type for e in await reader.envelopes(GROUP) if e.type is not T.HEARTBEAT]


async def has(redis_url: str, type_: EnvelopeType, n: int = 1) -> bool:
    async with open_bus(redis_url) as reader:
        return await reader.has(GROUP, type_, n)


def running_agent(tmp_path: Path, agent_id: str) -> tuple[Path, subprocess.Popen[bytes]]:
    """An agent's output file with its first progress, and a process standing for the agent (``--pid``)."""
    out = tmp_path / "agent.out"
    out.write_text(PROGRESS.format(agent_id, 10))
    return out, spawn(["sleep", "60"])


def ended(agent: subprocess.Popen[bytes]) -> None:
    agent.kill()
    agent.wait()


async def test_what_the_agent_wrote_just_before_its_process_ended_is_read(
    redis_url: str, tmp_path: Path
) -> None:
    out, agent = running_agent(tmp_path, "e1")

    def last_words() -> None:  # after the adapter's last read, before it sees the process ended
        with out.open("a") as stream:
            stream.write(COMPLETION.format("e1"))
        ended(agent)

    options = WatchOptions(path=out, poll_s=0.01, pid=agent.pid)
    try:
        async with watching(redis_url, "e1", options, last_words) as (task, armed, _):
            await wait_until(lambda: has(redis_url, T.PROGRESS), 20, "the progress")
            armed.set()
            assert await asyncio.wait_for(task, 20) is True
    finally:
        ended(agent)
    assert await published(redis_url) == [T.AGENT_STARTED, T.PROGRESS, T.COMPLETION_REPORT, T.AGENT_EXITED]


@pytest.mark.parametrize("how", ["rotate", "truncate"])
async def test_a_report_that_ends_a_file_rotated_or_truncated_is_published(
    redis_url: str, tmp_path: Path, how: str
) -> None:
    """A text report ends at the next heading or tag, or at the end of the output: the end of the file
    it was written to, when another file takes its place."""
    out = tmp_path / "agent.out"
    out.write_text(PROGRESS.format("e2", 10) + REPORT)

    def rotated() -> None:
        if how == "rotate":
            out.rename(tmp_path / "agent.out.1")
        out.write_text(PROGRESS.format("e2", 20))

    async with watching(redis_url, "e2", WatchOptions(path=out, poll_s=0.01), rotated) as (_, armed, _):
        await wait_until(lambda: has(redis_url, T.PROGRESS), 20, "the progress")
        armed.set()
        await wait_until(lambda: has(redis_url, T.PROGRESS, 2), 20, "the new file's progress")
    assert await published(redis_url) == [T.AGENT_STARTED, T.PROGRESS, T.RESULT, T.AGENT_STARTED, T.PROGRESS]


async def test_a_file_renamed_while_the_adapter_was_away_and_not_replaced_is_read_on(
    redis_url: str, tmp_path: Path
) -> None:
    out, agent = running_agent(tmp_path, "e3")
    options = WatchOptions(path=out, poll_s=0.01, pid=agent.pid)
    try:
        async with watching(redis_url, "e3", options):
            await wait_until(lambda: has(redis_url, T.PROGRESS), 20, "the progress")
        with out.open("a") as stream:
            stream.write(COMPLETION.format("e3"))
        out.rename(tmp_path / "agent.out.1")  # rotated, no new file yet; then the agent ends
        ended(agent)
        async with watching(redis_url, "e3", options) as (task, _, bus):
            logged: list[str] = []
            bus.log = logged.append
            assert await asyncio.wait_for(task, 20) is True
    finally:
        ended(agent)
    assert await published(redis_url) == [T.AGENT_STARTED, T.PROGRESS, T.COMPLETION_REPORT, T.AGENT_EXITED]
    assert any("renamed while the adapter was away" in line for line in logged), logged


@pytest.mark.parametrize("how", ["link loop", "directory made a file"])
async def test_a_path_that_names_no_file_any_more_is_waited_out_like_a_deleted_one(
    redis_url: str, tmp_path: Path, how: str
) -> None:
    where = tmp_path / "logs"
    where.mkdir()
    out = where / "agent.out"
    out.write_text(PROGRESS.format("e4", 10))
    with out.open("a") as agent:  # the agent's own descriptor, written to after the path is gone
        async with watching(redis_url, "e4", WatchOptions(path=out, poll_s=0.01)) as (task, _, _):
            await wait_until(lambda: has(redis_url, T.PROGRESS), 20, "the progress")
            if how == "link loop":
                out.unlink()
                os.symlink(out.name, out)
            else:
                where.rename(tmp_path / "logs.old")
                where.write_text("not a directory")
            agent.write(PROGRESS.format("e4", 20))
            agent.flush()
            await wait_until(lambda: has(redis_url, T.PROGRESS, 2), 20, "what the agent wrote on")
            assert not task.done()


async def test_idle_stop_ends_a_watch_without_an_exit_and_a_later_one_goes_on(
    redis_url: str, tmp_path: Path
) -> None:
    """The Task hook's adapters: an agent whose session ended without a completion held its adapter for
    ever. One idle for ``--idle-stop`` ends as a stop signal has it end; its agent's resume starts another."""
    out = tmp_path / "agent.out"
    out.write_text(PROGRESS.format("i1", 10))
    options = WatchOptions(path=out, poll_s=0.01, until_complete=True, idle_stop_s=0.3)
    async with watching(redis_url, "i1", options) as (first, _, _):
        assert await asyncio.wait_for(first, 30) is False  # ended by itself, not completed
    assert await published(redis_url) == [T.AGENT_STARTED, T.PROGRESS]  # no AGENT_EXITED
    with out.open("a") as more:
        more.write(PROGRESS.format("i1", 20) + COMPLETION.format("i1"))
    async with watching(redis_url, "i1", options) as (second, _, _):
        assert await asyncio.wait_for(second, 30) is True
    assert await published(redis_url) == [
        T.AGENT_STARTED, T.PROGRESS, T.PROGRESS, T.COMPLETION_REPORT, T.AGENT_EXITED
    ]  # fmt: skip


async def test_idle_stop_ends_a_watch_of_a_file_that_never_appears(redis_url: str, tmp_path: Path) -> None:
    """The hook starts an adapter before its agent writes: one whose agent never did waited for ever."""
    out = tmp_path / "never.out"
    options = WatchOptions(path=out, poll_s=0.01, until_complete=True, idle_stop_s=0.3)
    async with watching(redis_url, "i2", options) as (watch, _, _):
        assert await asyncio.wait_for(watch, 30) is False
    assert await published(redis_url) == []  # nothing said of an agent that showed no sign of life
