"""Clocks on the bus: a tick carries the server's time, and a new group starts with its shard's last tick
(an adapter whose clock is behind does not get its agents lost at the group's first tick)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

import pytest
from rules_kit import delegate
from workers.kit import connected, entries

from bus import envelope as envelope_module
from bus import wire
from bus.connection import Client
from bus.directives import LaunchRequest
from bus.envelope import decode, encode, new_envelope
from bus.errors import CommandFailed
from bus.events import AgentStarted, Decision, Heartbeat, Tick
from bus.findings import Finding
from bus.keys import Keys, StreamKind, open_namespace
from bus.publisher import Publisher
from coordinator import service, view
from coordinator.batch import arrival, target_streams
from coordinator.lease import members_key
from coordinator.policy import Policy
from coordinator.service import TICK_GROUP, Coordinator, CoordinatorOptions
from coordinator.shard import Shard, read_head
from coordinator.view import load_shard

POLICY = Policy(heartbeat_timeout_seconds=120, lost_timeout_seconds=900)
BEHIND = timedelta(hours=1)
"""How far the adapters' clock is behind the server's."""


async def _tick(client: Client, keys: Keys, now: datetime) -> None:
    """A coordinator's tick at ``now``, the server's time (and its entry's id)."""
    tick = new_envelope(Tick(now=now), agent_id="test", group_id=TICK_GROUP, source="tick")
    stream_id = f"{round(now.timestamp() * 1000)}-*"
    await client.xadd(keys.stream(0, StreamKind.SIGNALS), {"data": encode(tick)}, id=stream_id)


async def _start(client: Client, keys: Keys, group: str, now: datetime) -> None:
    at = now - BEHIND
    started = new_envelope(AgentStarted(task="scan"), agent_id=f"{group}-agent", group_id=group, ts=at)
    await Publisher(client, keys).publish(started)


async def _burst(client: Client, keys: Keys, name: str) -> int:
    options = CoordinatorOptions(name=name, tick_interval_s=3600)
    return await Coordinator(client, keys, POLICY, options).run(burst=True)


async def test_a_new_group_of_an_adapter_behind_the_coordinators_is_not_lost_at_its_first_tick(
    redis_url: str,
) -> None:
    async with connected(redis_url) as client:
        keys = await open_namespace(client, "clocks", 1)
        now = datetime.now(UTC)
        await _tick(client, keys, now)
        await _start(client, keys, "same-batch", now)
        assert await _burst(client, keys, "c1") == 2
        await _start(client, keys, "after-restart", now)  # a coordinator that loads the shard again
        assert await _burst(client, keys, "c2") == 1
        await _tick(client, keys, now + timedelta(seconds=5))
        assert await _burst(client, keys, "c3") == 1

        states = await load_shard(client, keys, 0)
        for group in ("same-batch", "after-restart"):
            agent = states[group].agents[f"{group}-agent"]
            # when its entry was added (the server's clock), not an hour before by the adapter's
            assert agent.state.value == "running" and now <= agent.last_seen < now + timedelta(seconds=5)
        events = [
            decode(fields[b"data"]).payload
            for _, fields in await entries(client, keys.stream(0, StreamKind.EVENTS))
        ]
        decided = [event.decision.value for event in events if isinstance(event, Decision)]
        assert decided == ["state_changed", "state_changed"]  # each registered, nothing timed out


async def _added_at(client: Client, keys: Keys, at: datetime, payload: Any, agent: str, group: str) -> None:
    """An entry of an adapter whose clock is :data:`BEHIND`, added to the stream at ``at`` (the server's
    time, its id's)."""
    sent = new_envelope(payload, agent_id=agent, group_id=group, ts=at - BEHIND)
    stream_id = f"{round(at.timestamp() * 1000)}-*"
    await client.xadd(keys.stream(0, StreamKind.SIGNALS), {"data": encode(sent)}, id=stream_id)


async def test_entries_applied_long_after_they_came_count_from_when_they_came(redis_url: str) -> None:
    """Every coordinator was down for longer than the lost timeout while an adapter behind the server's
    clock went on: its heartbeat counts from when it came (its entry's time), not from the last tick
    before the outage (it was lost at the first tick after); and a delegate approved then gets a launch
    request that expires the lost timeout after the request came (it expired before it was written)."""
    async with connected(redis_url) as client:
        keys = await open_namespace(client, "outage", 1)
        now = datetime.now(UTC).replace(microsecond=0)
        await _tick(client, keys, now)
        await _added_at(client, keys, now, AgentStarted(task="scan"), "worker", "outage-group")
        assert await _burst(client, keys, "before") == 2
        later = now + timedelta(seconds=1000)  # more than the lost timeout (900 s) without a coordinator
        await _added_at(client, keys, later, Heartbeat(), "worker", "outage-group")
        request = delegate("worker")
        await _added_at(client, keys, later, request, "worker", "outage-group")
        await _tick(client, keys, later + timedelta(seconds=5))
        assert await _burst(client, keys, "after") == 3

        state = (await load_shard(client, keys, 0))["outage-group"]
        assert state.agents["worker"].state.value == "running"
        assert state.agents["worker"].last_seen == later
        [launch] = [
            decode(fields[b"data"]).payload
            for _, fields in await entries(client, keys.stream(0, StreamKind.TASKS))
        ]
        assert isinstance(launch, LaunchRequest)
        assert launch.expires_at == later + timedelta(seconds=POLICY.lost_timeout_seconds)


async def test_a_launch_written_after_it_expired_is_requested_again_at_the_first_tick(redis_url: str) -> None:
    """A delegation came 10 s into an outage of every coordinator that lasted longer than the lost
    timeout: its launch request, which expires the lost timeout after the delegation came, was written
    expired (no launcher starts it). The first tick after the outage requests the launch again, with a new
    expiry, rather than have the delegate lost and its work retried with reduced scope."""
    async with connected(redis_url) as client:
        keys = await open_namespace(client, "born-expired", 1)
        now = datetime.now(UTC).replace(microsecond=0)
        await _tick(client, keys, now)
        await _added_at(client, keys, now, AgentStarted(task="scan"), "worker", "outage-group")
        assert await _burst(client, keys, "before") == 2
        came = now + timedelta(seconds=10)
        await _added_at(client, keys, came, delegate("worker"), "worker", "outage-group")
        await _added_at(client, keys, now + timedelta(seconds=1000), Heartbeat(), "worker", "outage-group")
        await _tick(client, keys, now + timedelta(seconds=1005))
        assert await _burst(client, keys, "after") == 3

        first, again, *more = [
            decode(fields[b"data"]).payload
            for _, fields in await entries(client, keys.stream(0, StreamKind.TASKS))
        ]
        assert more == [] and isinstance(first, LaunchRequest) and isinstance(again, LaunchRequest), more
        lost = timedelta(seconds=POLICY.lost_timeout_seconds)
        assert first.expires_at == came + lost  # before the tick that came after it was written
        assert again.new_agent_id == first.new_agent_id and again.request_id != first.request_id
        assert again.expires_at == now + timedelta(seconds=1005) + lost
        state = (await load_shard(client, keys, 0))["outage-group"]
        assert state.agents[first.new_agent_id].state.value == "running"
        assert state.agents["worker"].state.value == "running"


async def test_a_group_new_after_a_restart_with_no_stored_group_starts_with_the_stream_s_last_tick(
    redis_url: str,
) -> None:
    """A restarted coordinator that finds no group stored on a shard (all retired, or none yet) takes
    the shard's last tick from its stream; an adapter behind the server's clock then loses no agent."""
    async with connected(redis_url) as client:
        keys = await open_namespace(client, "clocks-empty", 1)
        now = datetime.now(UTC)
        await _tick(client, keys, now)
        assert await _burst(client, keys, "c1") == 1  # the tick, and no group to store it in
        await _start(client, keys, "later", now)
        assert await _burst(client, keys, "c2") == 1  # a new process: nothing stored on the shard
        await _tick(client, keys, now + timedelta(seconds=5))
        assert await _burst(client, keys, "c3") == 1

        agent = (await load_shard(client, keys, 0))["later"].agents["later-agent"]
        assert agent.state.value == "running" and now <= agent.last_seen < now + timedelta(seconds=5)


async def test_the_stream_s_last_tick_is_found_behind_pages_of_other_entries_and_forged_ticks(
    redis_url: str,
) -> None:
    """A take-over looks for the last valid tick among the stream's last entries: past a page of them,
    past entries that only name a tick (a finding's title, a broken entry) and past a forged tick."""
    async with connected(redis_url) as client:
        keys = await open_namespace(client, "last-tick", 1)
        stream = keys.stream(0, StreamKind.SIGNALS)
        shard = Shard(
            0,
            signals=stream,
            dead=keys.stream(0, StreamKind.DEAD),
            targets=target_streams(keys, 0),
            pipe=wire.Pipe(client, stream, hold=True),
            head=read_head("test", 100),
        )
        try:
            assert await shard.stream_tick() is None  # no stream yet
            now = datetime.now(UTC).replace(microsecond=0)
            await _tick(client, keys, now)
            pipe = client.pipeline(transaction=False)
            for i in range(1500):
                finding = Finding(title=f'"TICK" {i}' if i % 100 == 0 else f"finding {i}")
                envelope = new_envelope(finding, agent_id="a", group_id="g")
                pipe.xadd(stream, {"data": encode(envelope)})
            pipe.xadd(stream, {"data": b'{"type":"TICK"'})  # cut short
            pipe.xadd(stream, {"other": b'"TICK"'})  # no data field
            forged = new_envelope(Tick(now=now - timedelta(days=1)), agent_id="x", group_id=TICK_GROUP)
            pipe.xadd(stream, {"data": encode(forged)})
            await pipe.execute()

            assert await shard.stream_tick() == now
            assert await shard.stream_tick(scan=1504) == now  # the tick is the 1 504th entry back
            assert await shard.stream_tick(scan=1503) is None
        finally:
            await shard.pipe.close()


@pytest.mark.parametrize("forged", [datetime(2000, 1, 1, tzinfo=UTC), datetime(9999, 1, 1, tzinfo=UTC)])
async def test_a_tick_whose_time_is_not_its_entry_s_is_dead_lettered(
    redis_url: str, forged: datetime
) -> None:
    """Anyone who may add to a signals stream (a human or adapter user) may add a TICK: one stamped far
    from the time its entry was added would pull every time back, or push it on, and lose every agent."""
    async with connected(redis_url) as client:
        keys = await open_namespace(client, "forged-tick", 1)
        now = datetime.now(UTC)
        await _start(client, keys, "g", now + BEHIND)  # an adapter on the server's clock
        tick = new_envelope(Tick(now=forged), agent_id="someone", group_id=TICK_GROUP, source="tick")
        [forged_id] = await Publisher(client, keys).publish_many([tick])
        await _tick(client, keys, now + timedelta(seconds=5))
        assert await _burst(client, keys, "c1") == 3

        agent = (await load_shard(client, keys, 0))["g"].agents["g-agent"]
        assert agent.state.value == "running"
        assert now <= agent.last_seen <= now + timedelta(seconds=5)  # the stream's last (real) tick
        [(_, dead)] = await entries(client, keys.stream(0, StreamKind.DEAD))
        assert dead[b"entry_id"].decode() == forged_id
        assert b"more than 30 s apart, so no coordinator's" in dead[b"reason"]


class _Ahead(datetime):
    """The coordinator machine's clock, an hour ahead of the server's."""

    @classmethod
    def now(cls, tz: tzinfo | None = None) -> _Ahead:
        return cls.fromtimestamp((datetime.now(tz) + timedelta(hours=1)).timestamp(), tz)


async def test_a_tick_carries_the_server_s_time_not_its_coordinator_s(
    bus_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in (service, envelope_module):  # where the coordinator's ticks read its clock
        monkeypatch.setattr(module, "datetime", _Ahead, raising=False)
    async with connected(bus_url) as client:
        keys = await open_namespace(client, "tick-time", 1)
        stop = asyncio.Event()
        options = CoordinatorOptions(name="c", tick_interval_s=0.1)
        running = asyncio.create_task(Coordinator(client, keys, POLICY, options).run(stop=stop))
        try:
            reply: Any = await client.xread({keys.stream(0, StreamKind.SIGNALS): "0"}, count=1, block=10_000)
        finally:
            stop.set()
            await running
        [(_, [(_, fields)])] = reply
        envelope = decode(fields[b"data"])
        seconds, micros = await client.time()
        assert isinstance(envelope.payload, Tick) and envelope.ts == envelope.payload.now
        server = datetime.fromtimestamp(seconds + micros / 1e6, UTC)
        assert timedelta(0) <= server - envelope.ts < timedelta(seconds=10)


class _MinuteAhead:
    """The ``time`` module of a viewer whose clock is a minute ahead of the server's."""

    @staticmethod
    def time() -> float:
        return time.time() + 60


async def test_status_sees_a_live_coordinator_by_the_server_s_clock(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(view, "time", _MinuteAhead)
    async with connected(redis_url) as client:
        keys = await open_namespace(client, "viewer-clock", 1)
        await _start(client, keys, "waiting", datetime.now(UTC))  # a signal no coordinator read yet
        seconds, _ = await client.time()
        live = (seconds + 30) * 1000  # a coordinator's membership, 30 s left by the server's clock
        await client.zadd(members_key(keys), {"c": live})
        assert await view.no_coordinator_note(client, keys) == ""
        await client.zadd(members_key(keys), {"c": live - 60_000})  # expired 30 s ago
        note = await view.no_coordinator_note(client, keys)
        assert note == " (1 signal(s) wait for a coordinator: start one, `subagent-bus coordinator`)"


async def test_status_of_a_user_that_may_not_ask_the_time_uses_its_own_clock(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refused(client: object, key: object) -> datetime:
        raise CommandFailed("NOPERM User observer has no permissions to run the 'time' command")

    monkeypatch.setattr(view, "server_time", refused)  # an observer made by an earlier `acl --apply`
    async with connected(redis_url) as client:
        keys = await open_namespace(client, "viewer-old-acl", 1)
        await _start(client, keys, "waiting", datetime.now(UTC))
        seconds, _ = await client.time()
        await client.zadd(members_key(keys), {"c": (seconds + 30) * 1000})
        assert await view.no_coordinator_note(client, keys) == ""
        await client.zadd(members_key(keys), {"c": (seconds - 30) * 1000})
        assert "wait for a coordinator" in await view.no_coordinator_note(client, keys)


def test_an_entry_id_tells_when_it_was_added_or_nothing() -> None:
    assert arrival(b"1764519000000-7") == datetime(2025, 11, 30, 16, 10, tzinfo=UTC)
    # to the second: the entry of a second a batch reads it from depends on where batches were cut
    assert arrival(b"1764519000999-0") == arrival(b"1764519000000-7") != arrival(b"1764519001000-0")
    assert arrival(b"18446744073709551615-0") is None  # a hand-set id beyond the year 9999
