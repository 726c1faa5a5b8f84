"""A launch request for an agent whose earlier adapter still runs here: the launcher waits for it to end."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from pathlib import Path

from adapter_kit import open_bus, stream_fields, wait_until
from test_launch_stops import options
from test_launcher import GROUP, template

from agents.launcher import Launcher
from bus.directives import LaunchReason, LaunchRequest
from bus.envelope import EnvelopeType, new_envelope
from bus.keys import StreamKind, dead_stream_for
from bus.publisher import Publisher
from bus.settings import Settings
from bus.wire import server_time


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
        publisher = Publisher(bus.client, bus.keys)

        async def publish(n: int, expires_at: datetime | None) -> str:
            launch = LaunchRequest(
                request_id=f"req-again-{n}",
                new_agent_id="again",
                reason=LaunchReason.RESUME,
                task="t",
                expires_at=expires_at,
            )
            return await publisher.publish(
                new_envelope(launch, agent_id="again", group_id=GROUP), StreamKind.TASKS
            )

        async def pending() -> list[object]:
            entries = await bus.client.xpending_range(tasks, "launchers", "-", "+", 10)
            return [entry["message_id"] for entry in entries]

        async def first_started() -> bool:  # and acknowledged
            return record.exists() and record.read_text().count("start") == 1 and not await pending()

        async def past(when: datetime) -> bool:
            return await server_time(bus.client, tasks) > when

        await publish(1, None)
        launcher = Launcher(
            bus.client, bus.keys, Settings.from_url(redis_url), options(tmp_path, tpl, burst=True)
        )
        run = asyncio.create_task(launcher.run(asyncio.Event()))
        try:
            await wait_until(first_started, 30, "the first session to start")
            expires_at = await server_time(bus.client, tasks) + timedelta(seconds=1.5)
            second = await publish(2, expires_at)

            async def second_read() -> bool:  # and held while the first adapter runs
                return await pending() == [second.encode()]

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
