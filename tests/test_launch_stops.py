"""A launcher killed, or stopped, with launch requests in hand."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from adapter_kit import open_bus, stream_fields
from test_launcher import GROUP, request, template

from agents.launcher import Launcher, LauncherOptions
from agents.spawn import Spawner
from bus.directives import LaunchRequest
from bus.keys import StreamKind, dead_stream_for
from bus.settings import Settings


def options(tmp_path: Path, tpl: str, **more: object) -> LauncherOptions:
    return LauncherOptions(
        template=LauncherOptions.parse_template(tpl),
        prompt_dir=tmp_path / "prompts",
        log_dir=tmp_path / "logs",
        **more,  # type: ignore[arg-type]
    )


async def test_a_launcher_stopped_while_it_starts_an_agent_starts_no_other(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM while the first request of a batch is being started: the others are left for another
    launcher, not started only to be stopped at once (each a blocked agent for a human to recover)."""
    stop = asyncio.Event()
    spawn = Spawner.start

    async def stopped_meanwhile(self: Spawner, launch: LaunchRequest, group_id: str) -> object:
        started = await spawn(self, launch, group_id)
        stop.set()
        return started

    monkeypatch.setattr(Spawner, "start", stopped_meanwhile)
    async with open_bus(redis_url) as bus:
        for n in range(3):
            await request(bus, n)
        tpl = template(f"wait-file:{tmp_path / 'never'}", "complete")
        launcher = Launcher(bus.client, bus.keys, Settings.from_url(redis_url), options(tmp_path, tpl))
        assert await asyncio.wait_for(launcher.run(stop), 60) == 1
        tasks = bus.stream(GROUP, StreamKind.TASKS)
        assert (await bus.client.xpending(tasks, "launchers"))["pending"] == 2  # for any launcher to take


@pytest.mark.parametrize("why", ["expired", "delivered-too-often"])
async def test_a_request_a_killed_launcher_started_is_not_dead_lettered_when_read_again(
    redis_url: str, tmp_path: Path, why: str
) -> None:
    """A launcher started the agent and was killed before acknowledging the request; its restart reads
    the request again once it expired, or once it was delivered more than --max-attempts times. The
    mark says its agent started: it is acknowledged, not dead-lettered as never started."""
    expired = datetime.now(UTC) - timedelta(seconds=1) if why == "expired" else None
    async with open_bus(redis_url) as bus:
        await request(bus, 1, expires_at=expired)
        tasks = bus.stream(GROUP, StreamKind.TASKS)
        await bus.client.xgroup_create(tasks, "launchers", id="0")
        assert await bus.client.xreadgroup("launchers", "killed-launcher", {tasks: ">"}, count=1)
        mark = tmp_path / "logs" / "req-1.started"
        mark.parent.mkdir()
        mark.touch()  # what the killed launcher left
        more = {"burst": True, "reclaim_idle_ms": 1, "max_attempts": 3 if expired else 1}
        tpl = template("complete")
        launcher = Launcher(
            bus.client, bus.keys, Settings.from_url(redis_url), options(tmp_path, tpl, **more)
        )
        assert await asyncio.wait_for(launcher.run(asyncio.Event()), 60) == 0
        assert await stream_fields(bus.client, dead_stream_for(tasks)) == []
        assert (await bus.client.xpending(tasks, "launchers"))["pending"] == 0
    assert not mark.exists()
