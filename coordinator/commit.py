"""The coordinator's one atomic step: check the lease and the order, write everything, ack the batch.

A batch is committed by one Lua script, so either all of it happens or none of it does:

1. the shard's lease must still hold this process's token (a process paused past its lease, or one
   whose lease was taken over, commits nothing);
2. the batch must be the head of the consumer group's pending list, in order (no older entry is
   waiting in some other consumer's pending list), so entries are applied in stream order and an
   entry is never applied twice;
3. the new group states, the emitted stream entries (events, inbox directives, launch requests,
   findings, dead letters) and the XACK of the batch are written, and the lease is extended.

Every key lies in the shard's hash slot, so the script runs unchanged on Redis Cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["COMMIT_SCRIPT", "Commit", "CommitResult", "parse_result"]


class CommitResult(StrEnum):
    OK = "ok"
    LEASE_LOST = "lease"
    OUT_OF_ORDER = "order"


COMMIT_SCRIPT = """
local token, group, ttl, n = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
if redis.call('GET', KEYS[1]) ~= token then return 'lease' end
if n > 0 then
  local head = redis.call('XPENDING', KEYS[2], group, '-', '+', n)
  for i = 1, n do
    if head[i] == nil or head[i][1] ~= ARGV[4 + i] then return 'order' end
  end
end
local i = 5 + n
while i <= #ARGV do
  local op = ARGV[i]
  if op == 'X' then
    local count = tonumber(ARGV[i + 2])
    local fields = {}
    for j = 1, count do fields[j] = ARGV[i + 2 + j] end
    redis.call('XADD', KEYS[tonumber(ARGV[i + 1])], '*', unpack(fields))
    i = i + 3 + count
  elseif op == 'H' then
    redis.call('HSET', KEYS[tonumber(ARGV[i + 1])], ARGV[i + 2], ARGV[i + 3])
    i = i + 4
  elseif op == 'D' then
    redis.call('HDEL', KEYS[tonumber(ARGV[i + 1])], ARGV[i + 2])
    i = i + 3
  elseif op == 'S' then
    redis.call('SADD', KEYS[tonumber(ARGV[i + 1])], ARGV[i + 2])
    i = i + 3
  elseif op == 'L' then
    local key, count, keep = KEYS[tonumber(ARGV[i + 1])], tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
    redis.call('RPUSH', key, unpack(ARGV, i + 4, i + 3 + count))
    redis.call('LTRIM', key, -keep, -1)
    i = i + 4 + count
  else
    return redis.error_reply('unknown commit op ' .. tostring(op))
  end
end
if n > 0 then redis.call('XACK', KEYS[2], group, unpack(ARGV, 5, 4 + n)) end
redis.call('PEXPIRE', KEYS[1], ttl)
return 'ok'
"""


@dataclass
class Commit:
    """Accumulates one batch's writes; :meth:`script_args` lays them out for :data:`COMMIT_SCRIPT`."""

    lease_key: str
    stream_key: str
    entry_ids: list[str] = field(default_factory=list)
    _keys: list[str] = field(default_factory=list)
    _ops: list[bytes | str] = field(default_factory=list)

    def _key_index(self, key: str) -> int:
        if not self._keys:
            self._keys = [self.lease_key, self.stream_key]
        try:
            return self._keys.index(key) + 1
        except ValueError:
            self._keys.append(key)
            return len(self._keys)

    def xadd(self, key: str, fields: Mapping[str, bytes | str]) -> None:
        flat: list[bytes | str] = []
        for name, value in fields.items():
            flat += [name, value]
        self._ops += ["X", str(self._key_index(key)), str(len(flat)), *flat]

    def hset(self, key: str, name: str, value: bytes | str) -> None:
        self._ops += ["H", str(self._key_index(key)), name, value]

    def hdel(self, key: str, name: str) -> None:
        self._ops += ["D", str(self._key_index(key)), name]

    def sadd(self, key: str, member: str) -> None:
        self._ops += ["S", str(self._key_index(key)), member]

    def rpush_trim(self, key: str, values: list[str], keep: int) -> None:
        """Append ``values`` to a list and keep only its last ``keep`` items."""
        self._ops += ["L", str(self._key_index(key)), str(len(values)), str(keep), *values]

    def script_args(self, token: str, group: str, ttl_ms: int) -> tuple[list[str], list[Any]]:
        self._key_index(self.lease_key)
        argv: list[Any] = [token, group, str(ttl_ms), str(len(self.entry_ids)), *self.entry_ids, *self._ops]
        return list(self._keys), argv

    @property
    def empty(self) -> bool:
        return not self.entry_ids and not self._ops


def parse_result(raw: bytes | str) -> CommitResult:
    """The script's reply as a :class:`CommitResult`."""
    return CommitResult(raw.decode() if isinstance(raw, bytes) else raw)
