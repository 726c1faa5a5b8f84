"""The shard scripts a coordinator runs when it takes a shard over, on a real server (standalone and cluster)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from workers.kit import connected

from bus.errors import ConfigError
from bus.human_key import fingerprint
from bus.keys import Keys, StreamKind
from coordinator.lease import CLAIM_SCRIPT, PRUNE_SCRIPT, RENEW_SCRIPT, Leases, fair_share, members_key

KEYS = Keys("lease", 8)
SHARD = 3
STREAM = KEYS.stream(SHARD, StreamKind.SIGNALS)
DEAD = KEYS.stream(SHARD, StreamKind.DEAD)
LEASE = KEYS.state(SHARD, "lease")


def _leases(client: Any, name: str, key: bytes | None = None) -> Leases:
    return Leases(client, KEYS, name=name, ttl_ms=60_000, prune_idle_ms=1, key_mark=fingerprint(key))


async def _consumers(client: Any) -> dict[str, int]:
    return {_text(c["name"]): int(c["pending"]) for c in await client.xinfo_consumers(STREAM, "g")}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def test_prune_removes_idle_consumers_with_nothing_pending_and_keeps_the_others(bus_url: str) -> None:
    async with connected(bus_url) as client:
        await client.xgroup_create(STREAM, "g", id="0", mkstream=True)
        await client.xadd(STREAM, {"data": b"1"})
        await client.xreadgroup("g", "holder", {STREAM: ">"}, count=1)  # one entry pending
        await client.xgroup_createconsumer(STREAM, "g", "ghost")
        await client.xgroup_createconsumer(STREAM, "g", "fresh")
        prune = client.register_script(PRUNE_SCRIPT)

        assert await prune(keys=[STREAM], args=["g", 3_600_000]) == 0  # nobody has been idle an hour
        assert await _consumers(client) == {"holder": 1, "ghost": 0, "fresh": 0}

        assert await prune(keys=[STREAM], args=["g", 0]) == 2
        assert await _consumers(client) == {"holder": 1}  # its pending entry is still owned


async def test_claim_dead_letters_entries_deleted_while_pending_in_the_same_step(bus_url: str) -> None:
    async with connected(bus_url) as client:
        await client.xgroup_create(STREAM, "g", id="0", mkstream=True)
        ids = [_text(await client.xadd(STREAM, {"data": str(i).encode()})) for i in range(5)]
        await client.xreadgroup("g", "dead-owner", {STREAM: ">"}, count=5)
        await client.xdel(STREAM, ids[1], ids[3])
        await client.set(LEASE, "token")
        claim = client.register_script(CLAIM_SCRIPT)

        stale = await claim(keys=[LEASE, STREAM, DEAD], args=["other", "g", "new", 0, "0-0", 10, "gone"])
        assert stale is None  # not the lease holder: nothing claimed, nothing written
        assert await client.xlen(DEAD) == 0

        cursor, claimed = await claim(
            keys=[LEASE, STREAM, DEAD], args=["token", "g", "new", 0, "0-0", 10, "gone"]
        )
        assert (_text(cursor), claimed) == ("0-0", 3)
        assert await _consumers(client) == {"dead-owner": 0, "new": 3}
        rows: Any = await client.xrange(DEAD)
        dead = [fields for _, fields in rows]
        assert [_text(f[b"entry_id"]) for f in dead] == [ids[1], ids[3]]
        assert {_text(f[b"reason"]) for f in dead} == {"gone"}
        assert {_text(f[b"stream"]) for f in dead} == {STREAM}


async def test_renew_extends_only_its_own_lease_and_retakes_only_a_free_one(bus_url: str) -> None:
    async with connected(bus_url) as client:
        renew = client.register_script(RENEW_SCRIPT)
        await client.set(LEASE, "mine", px=1000)
        assert await renew(keys=[LEASE], args=["mine", 60_000, "renew"]) == 1
        assert await client.pttl(LEASE) > 1000
        assert await renew(keys=[LEASE], args=["other", 60_000, "retake"]) == 0  # held: never taken
        assert await client.get(LEASE) == b"mine"

        await client.delete(LEASE)  # expired
        assert await renew(keys=[LEASE], args=["mine", 60_000, "renew"]) == 0
        assert await client.get(LEASE) is None  # a plain renewal does not bring it back
        assert await renew(keys=[LEASE], args=["mine", 60_000, "retake"]) == 1
        assert await client.get(LEASE) == b"mine"
        assert 0 < await client.pttl(LEASE) <= 60_000


async def test_two_processes_of_one_name_are_two_members(bus_url: str) -> None:
    """Two coordinators given one ``--name`` split the shards: one of them held them all."""
    async with connected(bus_url) as client:
        first, second = (_leases(client, "same") for _ in range(2))
        assert await first.heartbeat() == 1
        assert await second.heartbeat() == 2
        assert fair_share(KEYS.shards, await first.heartbeat()) == 4
        await second.leave()
        assert await first.heartbeat() == 1


async def test_coordinators_that_disagree_about_the_human_key_do_not_run_side_by_side(
    bus_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """One without the key would apply forged human commands on the shards it holds: it does not start
    beside one with the key, nor one with another key; the same key joins, without one joins without one."""
    async with connected(bus_url) as client:
        keyed = _leases(client, "keyed", b"k" * 32)
        assert await keyed.join(register=True) == 1
        for newcomer, register, theirs, mine in (
            (_leases(client, "keyless"), True, "a human key", "no human key"),
            (_leases(client, "burst"), False, "a human key", "no human key"),  # a --burst run
            (_leases(client, "other", b"o" * 32), True, "another human key", "a human key"),
        ):
            with pytest.raises(ConfigError) as refused:
                await newcomer.join(register=register)
            assert str(refused.value).startswith(
                f"the live coordinator {keyed.member!r} of namespace lease runs with {theirs}, "
                f"this one with {mine}: give every coordinator of a namespace the same --human-key-file"
            )
            assert await keyed.heartbeat() == 1  # the refused one is not a member
        assert await _leases(client, "same", b"k" * 32).join(register=True) == 2

        # a version without fingerprints: not refused (a rolling upgrade would stall), not reported
        await client.zadd(members_key(KEYS), {"old:0123456789ab": 2**52})
        assert await _leases(client, "new", b"k" * 32).join(register=True) == 4
        # one that started in the same instant as this one, which the check at its start did not see
        await client.zadd(members_key(KEYS), {"late:0123456789ab:no-key": 2**52})
        with caplog.at_level(logging.ERROR, logger="subagent_bus.coordinator"):
            assert await keyed.heartbeat() == 5
            assert await keyed.heartbeat() == 5
        [logged] = [r.getMessage() for r in caplog.records]
        assert logged.startswith(
            "the live coordinator 'late:0123456789ab:no-key' of namespace lease runs with no"
        )


async def test_coordinators_without_the_key_join_each_other(bus_url: str) -> None:
    async with connected(bus_url) as client:
        assert await _leases(client, "one").join(register=True) == 1
        assert await _leases(client, "two").join(register=True) == 2
        assert await _leases(client, "burst").join(register=False) == 2
