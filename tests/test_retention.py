"""Trimming never removes an entry a consumer group still needs (real servers)."""

from __future__ import annotations

import asyncio
import random

import pytest
from click.testing import CliRunner
from workers.kit import connected, entries, read_group

from bus import retention
from bus.cli import main
from bus.connection import Client
from bus.errors import ConfigError
from bus.keys import Keys, StreamKind, open_namespace
from bus.retention import trim, trim_inboxes, trim_namespace

STREAM = "{ret:0}:signals"


async def _fill(client: Client, count: int, stream: str = STREAM) -> list[str]:
    pipe = client.pipeline(transaction=False)
    for i in range(count):
        pipe.xadd(stream, {"data": str(i).encode()})
    return [entry_id.decode() for entry_id in await pipe.execute()]


async def _read(client: Client, group: str, count: int, stream: str = STREAM) -> list[str]:
    return await read_group(client, stream, group, count)


async def _left(client: Client, stream: str = STREAM) -> list[str]:
    return [entry_id for entry_id, _ in await entries(client, stream)]


async def test_pending_and_undelivered_entries_are_kept_acked_ones_go(bus_url: str) -> None:
    async with connected(bus_url) as client:
        ids = await _fill(client, 10)
        await client.xgroup_create(STREAM, "g", id="0")
        delivered = await _read(client, "g", 6)
        await client.xack(STREAM, "g", *delivered[:3], delivered[4])  # ids[3] and ids[5] stay pending
        assert await trim(client, STREAM) == 3
        assert await _left(client) == ids[3:]
        await client.xack(STREAM, "g", ids[3], ids[5])
        assert await trim(client, STREAM) == 3  # up to the last delivered; 6..9 were never delivered
        assert await _left(client) == ids[6:]
        assert await trim(client, STREAM) == 0


async def test_redis_8_trims_with_xtrim_acked_which_also_removes_acked_entries_behind_a_pending_one(
    redis8_url: str,
) -> None:
    async with connected(redis8_url) as client:
        ids = await _fill(client, 10)
        await client.xgroup_create(STREAM, "g", id="0")
        await _read(client, "g", 6)
        await client.xack(STREAM, "g", ids[0], ids[2])  # ids[1], ids[3..5] stay pending
        await client.config_resetstat()
        assert await trim(client, STREAM, maxlen=0) == 2
        stats = await client.info("commandstats")
        assert (stats["cmdstat_xtrim"]["calls"], "cmdstat_eval" in stats) == (1, False)
        assert await _left(client) == [ids[1], *ids[3:]]


async def test_a_long_trim_is_done_a_bounded_number_of_entries_at_a_time(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One script removed all it could at once: a few hundred thousand entries held every other client
    for a tenth of a second."""
    monkeypatch.setattr(retention, "_TRIM_STEP", 10, raising=False)
    async with connected(redis_url) as client:
        ids = await _fill(client, 35)
        await client.xgroup_create(STREAM, "g", id="0")
        await client.xack(STREAM, "g", *(await _read(client, "g", 35))[:32])
        bare = "{ret:0}:tasks"  # without groups: only to an explicit bound
        bare_ids = await _fill(client, 25, bare)
        for stream, maxlen, filled, left in (
            (STREAM, None, ids, ids[32:]),
            (bare, 3, bare_ids, bare_ids[22:]),
        ):
            await client.config_resetstat()
            assert await trim(client, stream, maxlen=maxlen) == len(filled) - len(left)
            calls = int((await client.info("commandstats"))["cmdstat_eval"]["calls"])
            assert calls >= 3, calls  # 10 entries at most per call
            assert await _left(client, stream) == left
        assert await trim(client, bare, maxlen=0) == 3


async def test_the_slowest_group_sets_the_floor(bus_url: str) -> None:
    async with connected(bus_url) as client:
        ids = await _fill(client, 10)
        await client.xgroup_create(STREAM, "fast", id="0")
        await client.xgroup_create(STREAM, "slow", id="0")
        await client.xack(STREAM, "fast", *await _read(client, "fast", 10))
        await client.xack(STREAM, "slow", *await _read(client, "slow", 2))
        assert await trim(client, STREAM) == 2
        assert await _left(client) == ids[2:]
        await client.xgroup_create(STREAM, "new", id="0")  # a group that has read nothing holds everything
        assert await trim(client, STREAM) == 0


async def test_maxlen_and_minid_bound_what_is_removed(bus_url: str) -> None:
    async with connected(bus_url) as client:
        ids = await _fill(client, 2500)
        await client.xgroup_create(STREAM, "g", id="0")
        for _ in range(25):
            await client.xack(STREAM, "g", *await _read(client, "g", 100))
        assert await trim(client, STREAM, maxlen=2400) == 100
        assert await trim(client, STREAM, maxlen=2400) == 0
        assert await trim(client, STREAM, minid=ids[150]) == 50
        assert await _left(client) == ids[150:]
        assert await trim(client, STREAM, maxlen=100, minid=ids[1000]) == 850  # the stricter bound wins
        assert await trim(client, STREAM, maxlen=1200) == 300  # the cut is found in two steps back
        assert await _left(client) == ids[1300:]
        assert await trim(client, STREAM, maxlen=100) == 1100
        assert await _left(client) == ids[2400:]
        assert await trim(client, STREAM, maxlen=0) == 100  # every acknowledged entry


async def test_maxlen_never_goes_past_the_floor(bus_url: str) -> None:
    async with connected(bus_url) as client:
        ids = await _fill(client, 10)
        await client.xgroup_create(STREAM, "g", id="0")
        await client.xack(STREAM, "g", *(await _read(client, "g", 5))[:2])
        assert await trim(client, STREAM, maxlen=1) == 2
        assert await _left(client) == ids[2:]


async def test_streams_without_groups_are_trimmed_only_to_an_explicit_bound(bus_url: str) -> None:
    async with connected(bus_url) as client:
        ids = await _fill(client, 10)
        assert await trim(client, STREAM) == 0
        assert await trim(client, STREAM, maxlen=3) == 7
        assert await trim(client, STREAM, minid=ids[8]) == 1
        assert await _left(client) == ids[8:]
        assert await trim(client, "{ret:0}:missing", maxlen=1) == 0


async def test_a_group_created_at_the_end_holds_nothing(bus_url: str) -> None:
    async with connected(bus_url) as client:
        await _fill(client, 4)
        await client.xgroup_create(STREAM, "late", id="$")
        assert await trim(client, STREAM) == 4


async def test_ids_at_the_sequence_limit(bus_url: str) -> None:
    async with connected(bus_url) as client:
        top = f"5-{2**64 - 1}"
        await client.xadd(STREAM, {"data": b"a"}, id=top)
        await client.xadd(STREAM, {"data": b"b"}, id="6-0")
        await client.xgroup_create(STREAM, "g", id="0")
        await client.xack(STREAM, "g", *await _read(client, "g", 1))
        assert await trim(client, STREAM) == 1
        assert await _left(client) == ["6-0"]
        assert await trim(client, STREAM, minid="6") == 0


@pytest.mark.parametrize("minid", ["abc", "1-2-3", "-1", str(2**64)])
async def test_bad_minid_is_a_config_error(redis_url: str, minid: str) -> None:
    async with connected(redis_url) as client:
        with pytest.raises(ConfigError, match="stream id"):
            await trim(client, STREAM, minid=minid)
        with pytest.raises(ConfigError, match="maxlen"):
            await trim(client, STREAM, maxlen=-1)


@pytest.mark.parametrize("seed", range(5))
async def test_random_reads_acks_and_trims_never_remove_a_needed_entry(redis_url: str, seed: int) -> None:
    rng = random.Random(seed)
    async with connected(redis_url) as client:
        ids = await _fill(client, 300)
        groups = ["g1", "g2", "g3"]
        for group in groups:
            await client.xgroup_create(STREAM, group, id="0")
        acked: dict[str, set[str]] = {group: set() for group in groups}
        for _ in range(40):
            group = rng.choice(groups)
            delivered = await _read(client, group, rng.randint(1, 20))
            chosen = [entry_id for entry_id in delivered if rng.random() < 0.8]
            if chosen:
                await client.xack(STREAM, group, *chosen)
                acked[group].update(chosen)
            maxlen = rng.choice([None, rng.randint(0, 300)])
            minid = rng.choice([None, rng.choice(ids)])
            before = set(await _left(client))
            await trim(client, STREAM, maxlen=maxlen, minid=minid)
            removed = before - set(await _left(client))
            assert all(entry_id in acked[g] for entry_id in removed for g in groups)
            if maxlen is not None:
                assert len(before) - len(removed) >= min(len(before), maxlen)
            if minid is not None:
                assert all(ids.index(entry_id) < ids.index(minid) for entry_id in removed)


async def test_trim_namespace_leaves_findings_alone_unless_asked(bus_url: str) -> None:
    async with connected(bus_url) as client:
        keys = Keys("ret", 2)
        for shard in keys.all_shards():
            for kind in StreamKind:
                await _fill(client, 5, keys.stream(shard, kind))
            for kind, reader in retention._READERS.items():  # read whole: the bounds decide
                await client.xgroup_create(keys.stream(shard, kind), reader, id="$")
        removed = await trim_namespace(client, keys, maxlen_signals=1, maxlen_events=2, maxlen_tasks=3)
        assert removed == 2 * (4 + 3 + 2)
        for shard in keys.all_shards():
            assert await client.xlen(keys.stream(shard, StreamKind.FINDINGS)) == 5
            assert await client.xlen(keys.stream(shard, StreamKind.DEAD)) == 5
        # without bounds, every signal and task the readers acknowledged goes; events stay
        assert await trim_namespace(client, keys, maxlen_signals=None, maxlen_events=None) == 2 * (1 + 3)
        removed = await trim_namespace(
            client, keys, maxlen_signals=None, maxlen_events=None, maxlen_findings=4, include_findings=True
        )
        assert removed == 2


async def test_events_read_with_a_group_are_still_trimmed_only_to_an_explicit_n(bus_url: str) -> None:
    # a subscriber's own group says nothing about what the plain XREAD readers of events still need
    keys = Keys("ret", 1)
    events = keys.stream(0, StreamKind.EVENTS)
    async with connected(bus_url) as client:
        ids = await _fill(client, 5, events)
        await client.xgroup_create(events, "my-dashboard", id="0")
        await client.xack(events, "my-dashboard", *await _read(client, "my-dashboard", 5, events))
        assert await trim_namespace(client, keys, maxlen_signals=None, maxlen_events=None) == 0
        assert await _left(client, events) == ids
        assert await trim_namespace(client, keys, maxlen_signals=None, maxlen_events=2) == 3
        assert await _left(client, events) == ids[3:]


async def test_inboxes_lose_what_their_adapter_acknowledged_and_dead_letters_only_on_request(
    bus_url: str,
) -> None:
    keys = Keys("ret", 2)
    read_inbox, unread_inbox = keys.inbox(0, "agent-1"), keys.inbox(1, "agent-2")
    async with connected(bus_url) as client:
        read_ids = await _fill(client, 4, read_inbox)
        await _fill(client, 3, unread_inbox)
        await client.xgroup_create(read_inbox, "adapter", id="0")
        await client.xack(read_inbox, "adapter", *await _read(client, "adapter", 3, read_inbox))
        await client.xgroup_create(unread_inbox, "adapter", id="0")
        for shard in keys.all_shards():
            await _fill(client, 5, keys.stream(shard, StreamKind.DEAD))

        assert await trim_inboxes(client, keys) == 3
        assert await _left(client, read_inbox) == read_ids[3:]
        assert len(await _left(client, unread_inbox)) == 3
        assert await trim_namespace(client, keys, maxlen_signals=None, maxlen_events=None) == 0
        removed = await trim_namespace(client, keys, maxlen_signals=None, maxlen_events=None, maxlen_dead=2)
        assert removed == 2 * 3
        for shard in keys.all_shards():
            assert await client.xlen(keys.stream(shard, StreamKind.DEAD)) == 2


def test_the_trim_command_reports_what_it_removed_per_stream(redis_url: str) -> None:
    keys = Keys("retcli", 8)

    async def fill() -> None:
        async with connected(redis_url) as client:
            await open_namespace(client, keys.namespace, keys.shards)
            stream = keys.stream(3, StreamKind.SIGNALS)
            await _fill(client, 6, stream)
            await client.xgroup_create(stream, "coordinator", id="0")
            await client.xack(stream, "coordinator", *await _read(client, "coordinator", 4, stream))
            await _fill(client, 5, keys.stream(3, StreamKind.FINDINGS))

    asyncio.run(fill())
    args = [
        "trim",
        "--redis-url",
        redis_url,
        "--namespace",
        keys.namespace,
        "--events",
        "0",
        "--findings",
        "2",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "signals: 4 entries removed" in lines
    assert "findings: 3 entries removed" in lines
    assert "inboxes: 0 entries removed" in lines
    assert not [line for line in lines if line.startswith("dead:")]  # kept unless asked

    ignored = CliRunner().invoke(
        main, ["trim", "--redis-url", redis_url, "--no-inboxes", "--inbox-keep", "3"]
    )
    assert ignored.exit_code == 2 and "--inbox-keep keeps directives of the inboxes that --no-inboxes" in (
        ignored.output
    )

    for option in ("--signals", "--events", "--tasks", "--inbox-keep", "--dead", "--findings"):
        for n in ("-1", str(2**63)):  # no count Redis takes: refused before anything is trimmed
            bad = CliRunner().invoke(main, ["trim", "--redis-url", redis_url, option, n])
            assert (
                bad.exit_code == 2 and f"Invalid value for '{option}': {n} is not in the range" in bad.output
            )


def test_trim_of_a_namespace_that_does_not_exist_is_an_error_and_does_not_create_it(redis_url: str) -> None:
    result = CliRunner().invoke(main, ["trim", "--redis-url", redis_url, "--namespace", "typo"])
    assert result.exit_code == 1
    assert "namespace 'typo' does not exist" in result.output

    async def created() -> int:
        async with connected(redis_url) as client:
            return int(await client.exists("{typo}:meta"))

    assert asyncio.run(created()) == 0


def test_a_key_of_another_type_is_named(redis_url: str) -> None:
    async def damaged() -> str:
        async with connected(redis_url) as client:
            keys = await open_namespace(client, "wrongtype", 1)
            stream = keys.stream(0, StreamKind.SIGNALS)
            await client.set(stream, "not a stream")
            return stream

    stream = asyncio.run(damaged())
    for bound in ([], ["--signals", "1"]):  # the script, and XTRIM ACKED where the server has it
        result = CliRunner().invoke(
            main, ["trim", "--redis-url", redis_url, "--namespace", "wrongtype", *bound]
        )
        assert result.exit_code == 1
        assert f"cannot trim {stream}: " in result.output and "WRONGTYPE" in result.output, result.output
