"""A launch request for an agent whose earlier adapter still runs here: the launcher waits for it to end,
and starts other agents meanwhile."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from adapter_kit import Bus, open_bus, stream_fields, wait_until
from test_launch_stops import options
from test_launcher import GROUP, template

from agents import launcher as launcher_module
from agents.launcher import Launcher
from bus.directives import LaunchReason, LaunchRequest
from bus.envelope import EnvelopeType, new_envelope
from bus.keys import StreamKind, dead_stream_for
from bus.publisher import Publisher
from bus.settings import Settings
from bus.wire import server_time


async def publish(bus: Bus, agent_id: str, n: int, expires_at: datetime | None = None) -> str:
    """A launch request ``req-AGENT-N`` for ``agent_id``; the id of its entry."""
    launch = LaunchRequest(
        request_id=f"req-{agent_id}-{n}",
        new_agent_id=agent_id,
        reason=LaunchReason.RESUME if n > 1 else LaunchReason.DELEGATION,
        task="t",
        expires_at=expires_at,
    )
    envelope = new_envelope(launch, agent_id=agent_id, group_id=GROUP)
    return await Publisher(bus.client, bus.keys).publish(envelope, StreamKind.TASKS)


async def pending(bus: Bus) -> list[object]:
    """The entries of the tasks stream that the launchers read and did not settle."""
    tasks = bus.stream(GROUP, StreamKind.TASKS)
    entries = await bus.client.xpending_range(tasks, "launchers", "-", "+", 10)
    return [entry["message_id"] for entry in entries]


def starts(record: Path, agent_id: str) -> int:
    text = record.read_text() if record.exists() else ""
    return sum(row.split()[::2] == ["start", agent_id] for row in text.splitlines())


async def test_a_request_that_expires_while_the_previous_adapter_of_its_agent_ends_is_not_started(
    redis_url: str, tmp_path: Path
) -> None:
    """A resume request read in time, for an agent whose previous adapter still runs, expires while the
    launcher waits for that adapter: when it ends, the coordinator has declared the agent lost and retries
    it, so the request is dead-lettered, not started beside that retry."""
    go, record = tmp_path / "go", tmp_path / "record"
    tpl = template(f"wait-file:{go}", "complete", record=str(record))
    async with open_bus(redis_url) as bus:
        tasks = bus.stream(GROUP, StreamKind.TASKS)

        async def first_started() -> bool:  # and acknowledged
            return starts(record, "again") == 1 and not await pending(bus)

        async def past(when: datetime) -> bool:
            return await server_time(bus.client, tasks) > when

        await publish(bus, "again", 1)
        launcher = Launcher(
            bus.client, bus.keys, Settings.from_url(redis_url), options(tmp_path, tpl, burst=True)
        )
        run = asyncio.create_task(launcher.run(asyncio.Event()))
        try:
            await wait_until(first_started, 30, "the first session to start")
            expires_at = await server_time(bus.client, tasks) + timedelta(seconds=1.5)
            second = await publish(bus, "again", 2, expires_at)

            async def second_read() -> bool:  # and held while the first adapter runs
                return await pending(bus) == [second.encode()]

            await wait_until(second_read, 30, "the second request to be read")
            await wait_until(lambda: past(expires_at), 30, "the second request to expire")
        finally:
            go.touch()  # the first session ends: the second request is judged now
            launched = await asyncio.wait_for(run, 60)
        dead = await stream_fields(bus.client, dead_stream_for(tasks))
        started = await bus.of_type(GROUP, EnvelopeType.AGENT_STARTED)
    assert launched == 1
    assert record.read_text().count("start") == 1
    assert len(started) == 1
    reasons = [d[b"reason"].decode() for d in dead]
    assert len(reasons) == 1 and reasons[0].startswith("launch request req-again-2 expired at "), reasons


async def test_a_request_waiting_for_an_earlier_adapter_of_its_agent_holds_up_no_other_agent(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a resume request waits for its agent's previous adapter to end, the launcher goes on with the
    requests of other agents; the resume request is started once that adapter ended, not beside it."""
    monkeypatch.setattr(launcher_module, "_PREVIOUS_END_S", 600.0)  # far past the waits below
    record = tmp_path / "record"
    tpl = template(f"wait-file:{tmp_path}/go-{{request_id}}", "complete", record=str(record))
    (tmp_path / "go-req-again-2").touch()
    (tmp_path / "go-req-other-1").touch()
    async with open_bus(redis_url) as bus:
        await publish(bus, "again", 1)
        launcher = Launcher(
            bus.client, bus.keys, Settings.from_url(redis_url), options(tmp_path, tpl, burst=True)
        )
        run = asyncio.create_task(launcher.run(asyncio.Event()))
        try:

            async def first_started() -> bool:  # and acknowledged
                return starts(record, "again") == 1 and not await pending(bus)

            await wait_until(first_started, 30, "the first session to start")
            second = await publish(bus, "again", 2)
            await publish(bus, "other", 1)

            async def other_started() -> bool:  # and acknowledged, the second session still waiting
                return starts(record, "other") == 1 and await pending(bus) == [second.encode()]

            await wait_until(other_started, 60, "the other agent to start while the second session waits")
            assert starts(record, "again") == 1
        finally:
            (tmp_path / "go-req-again-1").touch()  # the first session ends: the second one starts
            launched = await asyncio.wait_for(run, 60)
        assert not await pending(bus)
    assert launched == 3
    rows = [row.split() for row in record.read_text().splitlines()]
    again = [(kind, float(at)) for kind, at, agent in rows if agent == "again"]
    assert [kind for kind, _ in again] == ["start", "end", "start", "end"], again
    assert again[1][1] <= again[2][1]  # the second session started after the first one ended
