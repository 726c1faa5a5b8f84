"""A launcher killed, or stopped, with launch requests in hand."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from adapter_kit import open_bus, stream_fields
from test_launcher import GROUP, request, template

from agents.launcher import Launcher, LauncherOptions
from agents.spawn import Spawner, started_mark
from bus.directives import LaunchReason, LaunchRequest
from bus.envelope import new_envelope
from bus.keys import StreamKind, dead_stream_for
from bus.publisher import Publisher
from bus.settings import Settings


def _mark(tmp_path: Path, group_id: str, request_id: str, agent_id: str) -> Path:
    """The mark a launcher killed after it started the agent and before it acknowledged the request left."""
    launch = LaunchRequest(
        request_id=request_id, new_agent_id=agent_id, reason=LaunchReason.DELEGATION, task="t"
    )
    mark = started_mark(tmp_path / "logs", launch, group_id)
    mark.parent.mkdir(exist_ok=True)
    return mark


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


@pytest.mark.parametrize("why", ["expired", "delivered-too-often", "mark-of-an-earlier-version"])
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
        mark = _mark(tmp_path, GROUP, "req-1", "agent-1")
        if why == "mark-of-an-earlier-version":  # named after the request alone
            mark = mark.with_name("req-1.started")
            (tmp_path / "logs" / "agent-1.log").touch()  # made before it
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


@pytest.mark.parametrize("earlier", [False, True])
async def test_a_mark_stands_for_its_own_group_s_request_not_another_s_of_the_same_id(
    redis_url: str, tmp_path: Path, earlier: bool
) -> None:
    """Two groups' requests of one id (a delegation's id hashes its signal and its agent's id only): the
    mark of the one the killed launcher started does not stand for the other, which is started; nor does
    the mark of a launcher of an earlier version, named after the request alone."""
    async with open_bus(redis_url) as bus:
        streams: set[str] = set()
        for group, agent in (("other-group-1", "agent-2"), (GROUP, "agent-1")):  # one shard, read in order
            launch = LaunchRequest(
                request_id="req-1", new_agent_id=agent, reason=LaunchReason.DELEGATION, task="scan"
            )
            envelope = new_envelope(launch, agent_id="auditor", group_id=group)
            await Publisher(bus.client, bus.keys).publish(envelope, StreamKind.TASKS)
            streams.add(bus.stream(group, StreamKind.TASKS))
        [tasks] = streams
        await bus.client.xgroup_create(tasks, "launchers", id="0")
        assert await bus.client.xreadgroup("launchers", "killed-launcher", {tasks: ">"})
        mark = _mark(tmp_path, GROUP, "req-1", "agent-1")
        if earlier:
            mark = mark.with_name("req-1.started")
            (tmp_path / "logs" / "agent-1.log").touch()
        mark.touch()  # the killed launcher started agent-1 only
        tpl = template("complete")
        more = {"burst": True, "reclaim_idle_ms": 1}
        launcher = Launcher(
            bus.client, bus.keys, Settings.from_url(redis_url), options(tmp_path, tpl, **more)
        )
        assert await asyncio.wait_for(launcher.run(asyncio.Event()), 60) == 1
        logs = sorted(p.name for p in (tmp_path / "logs").glob("*.log"))
        assert logs == (["agent-1.log", "agent-2.log"] if earlier else ["agent-2.log"])
        assert (await bus.client.xpending(tasks, "launchers"))["pending"] == 0
    assert not mark.exists()
