"""Shard leases and coordinator membership.

A lease is a key holding a token (the holder's name and a random part) with a TTL. Only the holder may
commit to the shard (the commit script checks the token), so a process that stalls past its TTL and
comes back cannot write anything stale. Membership is a sorted set of live coordinators scored by expiry
(Redis server time, so clocks of different machines never matter); each process takes at most its fair
share of the shards.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import uuid
from collections.abc import Awaitable
from typing import Any, TypeVar

from bus import wire
from bus.connection import Client, as_text, translated
from bus.consumer import DELETED_REASON
from bus.errors import BusError, ConfigError
from bus.human_key import fingerprint
from bus.keys import Keys, StreamKind
from bus.waits import wait_for

__all__ = [
    "CLAIM_SCRIPT",
    "MEMBERS_SCRIPT",
    "PRUNE_SCRIPT",
    "RELEASE_SCRIPT",
    "RENEW_SCRIPT",
    "Leases",
    "fair_share",
    "lease_key",
    "members_key",
]

# KEYS[1]: a lease; ARGV: token, ttl in ms, and 'retake' to take the lease again when it expired and
# nobody else took it. Returns 1 when the lease is (again) the token's.
RENEW_SCRIPT = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if not holder and ARGV[3] == 'retake' then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""

RELEASE_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# KEYS: lease, signals stream, dead-letter stream; ARGV: token, group, consumer, min idle ms, cursor, count,
# reason. Claims up to ``count`` entries pending for at least the idle time for the lease holder, without
# counting a delivery (JUSTID), and dead-letters in the same step the ids Redis >= 7 reports as deleted:
# XAUTOCLAIM drops those from the pending list, so a claim made apart from the dead letter could lose
# them for good. Returns ``{next cursor, entries claimed}`` ('0-0' when done), or false when the lease is
# not the caller's.
CLAIM_SCRIPT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return false end
local reply = redis.call('XAUTOCLAIM', KEYS[2], ARGV[2], ARGV[3], ARGV[4], ARGV[5], 'COUNT', ARGV[6], 'JUSTID')
for _, id in ipairs(reply[3] or {}) do
  redis.call('XADD', KEYS[3], '*', 'reason', ARGV[7], 'stream', KEYS[2], 'entry_id', id, 'deliveries', '0')
end
return {reply[1], #reply[2]}
"""

# KEYS[1]: a signals stream; ARGV: group, idle ms. Deletes the group's consumers that hold no pending entry
# and have not read for the idle time: the names of processes that died or were restarted under a new
# name, which would otherwise pile up. One step, so no consumer reads an entry between the check and the
# delete (a deleted consumer's pending entries would be lost); a live one is recreated by its next read.
PRUNE_SCRIPT = """
local pruned = 0
for _, info in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local c = {}
  for i = 1, #info, 2 do c[info[i]] = info[i + 1] end
  if c['pending'] == 0 and c['idle'] >= tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], c['name'])
    pruned = pruned + 1
  end
end
return pruned
"""

# KEYS[1]: the members set; ARGV: member, ttl in ms, 'join' (register or renew), 'look' (register nothing)
# or 'leave' (unregister), and the human key's fingerprint, which ends every member's name. Returns the
# live count and a live member whose name ends with another fingerprint (false when none does; a member
# of an older version, whose name ends with no fingerprint, is none: it would stall a rolling upgrade).
MEMBERS_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if ARGV[3] == 'leave' then
  redis.call('ZREM', KEYS[1], ARGV[1])
elseif ARGV[3] == 'join' then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
end
for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local mark = string.match(member, ':([^:]*)$') or ''
  if mark ~= ARGV[4] and (mark == 'no-key' or string.sub(mark, 1, 4) == 'key-') then
    return {redis.call('ZCARD', KEYS[1]), member}
  end
end
return {redis.call('ZCARD', KEYS[1]), false}
"""


T = TypeVar("T")

log = logging.getLogger("subagent_bus.coordinator")


def fair_share(shards: int, members: Any) -> int:
    """How many shards one of ``members`` live coordinators should own at most."""
    return math.ceil(shards / max(1, int(members)))


def members_key(keys: Keys) -> str:
    """The sorted set of live coordinators, each scored by when it expires (server time, in ms)."""
    return f"{keys.namespace}:coordinators"


def lease_key(keys: Keys, shard: int) -> str:
    """The key of a shard's lease: it exists while a coordinator holds the shard."""
    return keys.state(shard, "lease")


class Leases:
    """The lease and membership operations of one coordinator process (``name``) on its shards.

    An operation that takes a ``pipe`` runs on it (a shard loop's own connection, in order with the
    shard's reads and commits); the others, called from outside a shard loop, use a pipe of their own.
    """

    def __init__(
        self, client: Client, keys: Keys, *, name: str, ttl_ms: int, prune_idle_ms: int, key_mark: str
    ) -> None:
        self.client = client
        self.keys = keys
        self.name = name
        self.key_mark = key_mark
        """The human key's fingerprint (:func:`bus.human_key.fingerprint`), which ends the member's name."""
        self.member = f"{name}:{uuid.uuid4().hex[:12]}:{key_mark}"
        """This process in the members set: two processes given one ``--name`` count as two live ones,
        and split the shards like any two."""
        self.ttl_ms = ttl_ms
        self.prune_idle_ms = prune_idle_ms
        self._renew = wire.Script(RENEW_SCRIPT)
        self._release = wire.Script(RELEASE_SCRIPT)
        self._members = wire.Script(MEMBERS_SCRIPT)
        self._claim = wire.Script(CLAIM_SCRIPT)
        self._prune = wire.Script(PRUNE_SCRIPT)
        self._members_key = members_key(keys)
        self._disagreeing: str | None = None

    def key(self, shard: int) -> str:
        """The shard's lease key."""
        return lease_key(self.keys, shard)

    async def take(self, shard: int) -> str | None:
        """The token of a lease newly taken on the shard, or None when another process holds it.

        The token is this process's name and a random part: unique per taking (the commit script's
        fencing check), and ``GET`` on a lease key shows who holds the shard."""
        token = f"{self.name}:{uuid.uuid4().hex}"
        with translated():
            got = await self.client.set(self.key(shard), token, nx=True, px=self.ttl_ms)
        return token if got else None

    async def holder(self, shard: int) -> tuple[str | None, int]:
        """The token of the shard's lease (None: nobody holds it) and the milliseconds it has left."""
        with translated():
            token = await self.client.get(self.key(shard))
            left = await self.client.pttl(self.key(shard))
        return (as_text(token) if token is not None else None), int(left)

    async def renew(self, pipe: wire.Pipe, shard: int, token: str, *, retake: bool = False) -> bool:
        """Extend the lease by its TTL; False when it is no longer ``token``'s.

        ``retake``: when the lease expired and nobody took it since, take it again with the same token.
        Safe only where nothing was committed on the strength of the lease since it was taken (a
        take-over still loading): whoever held the shard in between and committed changed its version
        counter, which the next commit checks.
        """
        mode = "retake" if retake else "renew"
        return bool(await self._run(self._renew, pipe, [self.key(shard)], token, self.ttl_ms, mode))

    async def hold(self, pipe: wire.Pipe, shard: int, token: str, work: Awaitable[T]) -> tuple[T, bool]:
        """``work``'s result, awaited while the lease is renewed beside it; and whether it is still held.

        For a take-over's load, which can take longer than a lease lasts: a lease lost to every load
        would keep the shard from ever being applied again. Should it expire all the same (the load
        holds the interpreter for a while), it is taken again if nobody else did (see :meth:`renew`).
        """
        done = asyncio.Event()

        async def keep() -> None:
            while not await wait_for(done, self.ttl_ms / 3000) and await self.renew(
                pipe, shard, token, retake=True
            ):
                pass

        keeping = asyncio.create_task(keep())
        try:
            result = await work
        finally:
            done.set()
            await keeping  # not cancelled: a renewal cut short would leave its reply on the held pipe
        return result, await self.renew(pipe, shard, token, retake=True)

    async def release(self, shard: int, token: str) -> None:
        """Give the lease up at once (if it is still ``token``'s), so another process need not wait."""
        with contextlib.suppress(BusError):
            await self._run(self._release, None, [self.key(shard)], token)

    async def claim(
        self,
        pipe: wire.Pipe,
        shard: int,
        token: str,
        group: str,
        *,
        idle_ms: int,
        count: int,
        until_done: bool,
    ) -> int:
        """Claim the group's entries pending for at least ``idle_ms`` for this process (dead-lettering
        deleted ones): one round of ``count``, or every round ``until_done``; how many were claimed."""
        keys = [
            self.key(shard),
            self.keys.stream(shard, StreamKind.SIGNALS),
            self.keys.stream(shard, StreamKind.DEAD),
        ]
        cursor: bytes = b"0-0"
        claimed = 0
        while True:
            args = (token, group, self.name, idle_ms, cursor, count, DELETED_REASON)
            reply = await self._run(self._claim, pipe, keys, *args)
            if reply is None:  # the lease expired meanwhile: the next commit finds out
                return claimed
            cursor, claimed = reply[0], claimed + int(reply[1])
            if not until_done or cursor == b"0-0":
                return claimed

    async def prune(self, pipe: wire.Pipe, shard: int, group: str) -> int:
        """Remove the group's consumers idle past ``prune_idle_ms`` with nothing pending; how many."""
        stream = self.keys.stream(shard, StreamKind.SIGNALS)
        return int(await self._run(self._prune, pipe, [stream], group, self.prune_idle_ms))

    async def join(self, *, register: bool) -> int:
        """Check that every live coordinator holds this one's human key, or none as this one does (a
        :class:`~bus.errors.ConfigError` otherwise, and this process not registered); register it as live
        if ``register``. The number of live coordinators."""
        count, other = await self._heartbeat("join" if register else "look")
        if other is not None:
            await self.leave()
            raise ConfigError(self._disagreement(other))
        return count

    async def heartbeat(self) -> int:
        """Register this process as live for a TTL; the number of live coordinators. A live one whose human
        key differs from this one's (started in the same instant, which the check at the start cannot
        see) is logged as an error once."""
        count, other = await self._heartbeat("join")
        if other is not None and other != self._disagreeing:
            log.error("%s", self._disagreement(other))
        self._disagreeing = other
        return count

    async def _heartbeat(self, mode: str) -> tuple[int, str | None]:
        keys = [self._members_key]
        count, other = await self._run(
            self._members, None, keys, self.member, self.ttl_ms, mode, self.key_mark
        )
        return int(count), (as_text(other) if other is not None else None)

    def _disagreement(self, other: str) -> str:
        keyless = fingerprint(None)
        mine = "no human key" if self.key_mark == keyless else "a human key"
        if other.endswith(f":{keyless}"):
            theirs = "no human key"
        else:
            theirs = "a human key" if self.key_mark == keyless else "another human key"
        return (
            f"the live coordinator {other!r} of namespace {self.keys.namespace} runs with {theirs}, this one "
            f"with {mine}: give every coordinator of a namespace the same --human-key-file, or none (one "
            "without it applies forged human commands on its shards). A coordinator that was killed holds "
            f"its place for up to {self.ttl_ms / 1000:g} s."
        )

    async def leave(self) -> None:
        """Unregister this process, so the others take their larger share at once."""
        with contextlib.suppress(BusError):
            await self._run(self._members, None, [self._members_key], self.member, 0, "leave", self.key_mark)

    async def _run(
        self, script: wire.Script, pipe: wire.Pipe | None, keys: list[str], *args: str | bytes | int
    ) -> Any:
        pipe = pipe or wire.Pipe(self.client, keys[0])
        argv = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        return await script(pipe, [key.encode() for key in keys], argv)
