"""The coordinator's one atomic step: check the lease and the order, write everything, ack the batch.

A batch is committed by one Lua script, so either all of it happens or none of it does:

1. the shard's lease must still hold this process's token (a process paused past its lease, or one
   whose lease was taken over, commits nothing);
2. the shard's version (a counter every commit increments) must be the one the process's in-memory
   states were loaded or last committed at: a server that restarted and lost its last writes holds an
   older version, and the process reloads the states instead of writing changes computed against
   writes that no longer exist;
3. the batch must be the head of the consumer group's pending list, in order (no older entry is
   waiting in some other consumer's pending list), so entries are applied in stream order and an
   entry is never applied twice;
4. the new group states (or, for a retired group, the deletion of its state), the emitted stream entries
   (events, inbox directives, launch requests, findings, dead letters), the acknowledgement of inbox
   directives a new session's prompt carries instead, and the XACK of the batch are written, and the
   lease is extended.

Redis does not undo what a script wrote before one of its commands failed, so before its first write the
script checks that every key it writes holds the type of its write (or nothing), that a stream it adds to
has ids left (an entry added with an id of the last millisecond leaves next to none), and, on Redis 7+,
that the user may write it: a key of another type in the namespace, or a role without a permission, fails
the batch with nothing written, rather than writing its first entries again at every retry. Long lists of
arguments (the acks and idempotency ids of a batch of thousands) go out in slices: Lua's ``unpack`` stops
at about 8 000.

Every key lies in the shard's hash slot, so the script runs unchanged on Redis Cluster.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

import orjson

from bus.errors import CommandFailed, DecodeError

__all__ = [
    "COMMIT_SCRIPT",
    "Commit",
    "CommitRefused",
    "CommitResult",
    "parse_result",
    "refusals",
    "stored_version",
]


class CommitResult(StrEnum):
    OK = "ok"
    LEASE_LOST = "lease"
    STALE = "stale"
    OUT_OF_ORDER = "order"


COMMIT_SCRIPT = """
local token, group, ttl, version, n = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
if redis.call('GET', KEYS[1]) ~= token then return 'lease' end
if (redis.call('GET', KEYS[3]) or '0') ~= version then return 'stale' end
if n > 0 then
  local head = redis.call('XPENDING', KEYS[2], group, '-', '+', n)
  for i = 1, n do
    if head[i] == nil or head[i][1] ~= ARGV[5 + i] then return 'order' end
  end
end
local ops = cmsgpack.unpack(ARGV[6 + n])
-- Lua's unpack stops at about 8 000 values: a long list goes out in slices
local function sliced(command, key, extra, list, first, last)
  for s = first, last, 1000 do
    if extra then
      redis.call(command, key, extra, unpack(list, s, math.min(s + 999, last)))
    else
      redis.call(command, key, unpack(list, s, math.min(s + 999, last)))
    end
  end
end
local function span(i)
  local op = ops[i]
  if op == 'X' then return 3 + tonumber(ops[i + 2]) end
  if op == 'L' then return 4 + tonumber(ops[i + 2]) end
  if op == 'H' then return 4 end
  if op == 'K' then return 2 end
  if op == 'A' then return 4 + tonumber(ops[i + 3]) end
  return 3
end
-- 'A': directives of an inbox the rules carry on themselves (in a new session's prompt), acknowledged
-- there unread: pending ones, and those the group has not read yet
local function carried(fields, first, last)
  for j = 1, #fields, 2 do
    if fields[j] == 'data' then
      for p = first, last do
        if string.sub(fields[j + 1], 1, #ops[p]) == ops[p] then return true end
      end
      return false
    end
  end
  return false
end
local function ack_unread(key, group, first, last)
  if redis.call('EXISTS', key) == 0 then return end
  local read
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', key)) do
    local name, delivered
    for j = 1, #g, 2 do
      if g[j] == 'name' then name = g[j + 1] elseif g[j] == 'last-delivered-id' then delivered = g[j + 1] end
    end
    if name == group then read = delivered end
  end
  if read == nil then
    redis.call('XGROUP', 'CREATE', key, group, '0')
    read = '0-0'
  end
  for _, row in ipairs(redis.call('XPENDING', key, group, '-', '+', 1000)) do
    local entry = redis.call('XRANGE', key, row[1], row[1])[1]
    if entry and carried(entry[2], first, last) then redis.call('XACK', key, group, row[1]) end
  end
  -- unread: read up to the last carried one, which are acknowledged; another is left pending as an
  -- adapter that died leaves one (idle, no delivery counted), which the inbox's next reader takes at once
  local rows = redis.call('XRANGE', key, '(' .. read, '+', 'COUNT', 1000)
  local upto = 0
  for j, row in ipairs(rows) do
    if carried(row[2], first, last) then upto = j end
  end
  if upto == 0 then return end
  redis.call('XREADGROUP', 'GROUP', group, group, 'COUNT', upto, 'STREAMS', key, '>')
  for j = 1, upto do
    if carried(rows[j][2], first, last) then
      redis.call('XACK', key, group, rows[j][1])
    else
      redis.call('XCLAIM', key, group, group, 0, rows[j][1], 'IDLE', 86400000, 'RETRYCOUNT', 0, 'JUSTID')
    end
  end
end
-- Redis keeps what a script wrote before a command of it failed: every write must be known to succeed
-- before the first, or the batch, applied again, would write its first entries twice.
local types = {X = 'stream', H = 'hash', D = 'hash', S = 'set', R = 'set', L = 'list', A = 'stream'}
local probes = {X = {'XADD', '*', 'f', 'v'}, H = {'HSET', 'f', 'v'}, D = {'HDEL', 'f'}, S = {'SADD', 'm'},
                R = {'SREM', 'm'}, L = {'RPUSH', 'v'}, K = {'DEL'}, A = {'XACK', 'g', '0-1'}}
local refused = 'nothing of the batch was written'
local role = refused .. ' (an ACL user made by `subagent-bus acl` for an earlier version lacks it: ' ..
  'apply the rules of this one)'
local last_ms = '18446744073709551615-'  -- an id of the last millisecond: only someone's XADD makes one
local checked = {}
local i = 1
while i <= #ops do
  local op, key = ops[i], KEYS[tonumber(ops[i + 1])]
  local probe = probes[op]
  if probe == nil then return redis.error_reply('unknown commit op ' .. tostring(op)) end
  if not checked[op .. key] then
    checked[op .. key] = true
    if redis.acl_check_cmd and not redis.acl_check_cmd('TYPE', key) then
      return redis.error_reply('NOPERM this user may not TYPE ' .. key .. ': ' .. role)
    end
    local have = redis.call('TYPE', key)['ok']
    if types[op] and have ~= 'none' and have ~= types[op] then
      return redis.error_reply('WRONGTYPE ' .. key .. ' holds a ' .. have .. ', not a ' .. types[op] ..
        ': ' .. refused)
    end
    if op == 'X' and have == 'stream' then  -- XADD * fails once the last id is used: none is near it
      local info = redis.call('XINFO', 'STREAM', key)
      for j = 1, #info, 2 do
        if info[j] == 'last-generated-id' then
          if string.sub(info[j + 1], 1, #last_ms) == last_ms then
            return redis.error_reply('ERR ' .. key .. ' has (next to) no entry ids left: its last is ' ..
              info[j + 1] .. ': ' .. refused)
          end
          break
        end
      end
    end
    if redis.acl_check_cmd and not redis.acl_check_cmd(probe[1], key, unpack(probe, 2)) then
      return redis.error_reply('NOPERM this user may not ' .. probe[1] .. ' ' .. key .. ': ' .. role)
    end
    if op == 'A' and redis.acl_check_cmd then
      for _, c in ipairs({{'XINFO', 'GROUPS', key}, {'XGROUP', 'CREATE', key, 'g', '0'}, {'XPENDING', key, 'g'},
                          {'XRANGE', key, '-', '+'}, {'XREADGROUP', 'GROUP', 'g', 'c', 'STREAMS', key, '>'},
                          {'XCLAIM', key, 'g', 'c', '0', '0-1'}}) do
        if not redis.acl_check_cmd(unpack(c)) then
          return redis.error_reply('NOPERM this user may not ' .. c[1] .. ' ' .. key .. ': ' .. role)
        end
      end
    end
  end
  i = i + span(i)
end
i = 1
while i <= #ops do
  local op = ops[i]
  if op == 'X' then
    local count = tonumber(ops[i + 2])
    local fields = {}
    for j = 1, count do fields[j] = ops[i + 2 + j] end
    redis.call('XADD', KEYS[tonumber(ops[i + 1])], '*', unpack(fields))
  elseif op == 'H' then
    redis.call('HSET', KEYS[tonumber(ops[i + 1])], ops[i + 2], ops[i + 3])
  elseif op == 'D' then
    redis.call('HDEL', KEYS[tonumber(ops[i + 1])], ops[i + 2])
  elseif op == 'S' then
    redis.call('SADD', KEYS[tonumber(ops[i + 1])], ops[i + 2])
  elseif op == 'R' then
    redis.call('SREM', KEYS[tonumber(ops[i + 1])], ops[i + 2])
  elseif op == 'K' then
    redis.call('DEL', KEYS[tonumber(ops[i + 1])])
  elseif op == 'A' then
    ack_unread(KEYS[tonumber(ops[i + 1])], ops[i + 2], i + 4, i + 3 + tonumber(ops[i + 3]))
  else
    local key, count, keep = KEYS[tonumber(ops[i + 1])], tonumber(ops[i + 2]), tonumber(ops[i + 3])
    sliced('RPUSH', key, nil, ops, i + 4, i + 3 + count)
    redis.call('LTRIM', key, -keep, -1)
  end
  i = i + span(i)
end
if n > 0 then sliced('XACK', KEYS[2], group, ARGV, 6, 5 + n) end
redis.call('INCR', KEYS[3])
redis.call('PEXPIRE', KEYS[1], ttl)
return 'ok'
"""

_REFUSED: Final = "nothing of the batch was written"
"""In the error of a commit its checks refused (the script's ``refused``)."""


class CommitRefused(CommandFailed):
    """The commit script's checks refused the batch before its first write (a key of another type, a
    permission the user lacks): nothing of it was written, and it is not its entries' doing."""


@contextlib.contextmanager
def refusals() -> Iterator[None]:
    """Run the commit script: a batch its checks refused leaves as :class:`CommitRefused`."""
    try:
        yield
    except CommandFailed as exc:
        if _REFUSED not in str(exc):
            raise
        raise CommitRefused(str(exc)) from exc


_HEADER: Final = struct.Struct(">BI")
"""A MessagePack type byte and a 32-bit length."""
_ARRAY32: Final = 0xDD
_STR32: Final = 0xDB


def _item(value: bytes | str) -> bytes:
    """One string of a MessagePack array (``str 32``; ``cmsgpack`` reads any bytes as a Lua string)."""
    data = value.encode() if isinstance(value, str) else value
    return _HEADER.pack(_STR32, len(data)) + data


_X, _H, _D, _S, _R, _K, _L, _A = (_item(op) for op in "XHDSRKLA")
_TWO, _DATA = _item("2"), _item("data")


@dataclass
class Commit:
    """Accumulates one batch's writes; :meth:`script_args` lays them out for :data:`COMMIT_SCRIPT`.

    The writes travel as one MessagePack array (the script unpacks it with ``cmsgpack``) rather than one
    script argument each: a batch holds hundreds of them, and the client library's per-argument work
    cost more than applying the batch.
    """

    lease_key: str
    stream_key: str
    version_key: str
    entry_ids: list[bytes] = field(default_factory=list)
    _keys: dict[str, bytes] = field(default_factory=dict)
    _ops: list[bytes] = field(default_factory=list)

    def _key(self, key: str) -> bytes:
        """The packed index of ``key`` in the script's KEYS (from 1; lease, stream and version come first)."""
        if not self._keys:
            self._keys = {
                self.lease_key: _item("1"),
                self.stream_key: _item("2"),
                self.version_key: _item("3"),
            }
        index = self._keys.get(key)
        if index is None:
            index = self._keys[key] = _item(str(len(self._keys) + 1))
        return index

    def xadd(self, key: str, fields: Mapping[str | bytes, bytes | str]) -> None:
        self._ops += (_X, self._key(key), _item(str(2 * len(fields))))
        for name, value in fields.items():
            self._ops += (_item(name), _item(value))

    def xadd_data(self, key: str, data: bytes) -> None:
        """``xadd(key, {"data": data})``, the form of every envelope."""
        # _item(data) written out (as in hset and rpush_trim): a call less for every envelope emitted
        self._ops += (_X, self._key(key), _TWO, _DATA, _HEADER.pack(_STR32, len(data)) + data)

    def hset(self, key: str, name: str, value: bytes | str) -> None:
        # for every record the batch changed
        data = value.encode() if isinstance(value, str) else value
        field = name.encode()
        pack = _HEADER.pack
        self._ops += (_H, self._key(key), pack(_STR32, len(field)) + field, pack(_STR32, len(data)) + data)

    def hdel(self, key: str, name: str) -> None:
        self._ops += (_D, self._key(key), _item(name))

    def sadd(self, key: str, member: str) -> None:
        self._ops += (_S, self._key(key), _item(member))

    def srem(self, key: str, member: str) -> None:
        self._ops += (_R, self._key(key), _item(member))

    def delete(self, key: str) -> None:
        self._ops += (_K, self._key(key))

    def rpush_trim(self, key: str, values: list[str], keep: int) -> None:
        """Append ``values`` to a list and keep only its last ``keep`` items."""
        pack = _HEADER.pack  # for every id of a group's window the batch adds
        items = [pack(_STR32, len(data)) + data for data in map(str.encode, values)]
        self._ops += (_L, self._key(key), _item(str(len(values))), _item(str(keep)), *items)

    def ack_unread(self, key: str, group: str, envelope_ids: tuple[str, ...]) -> None:
        """Acknowledge in ``group`` of the stream ``key`` (an inbox) the entries of these envelopes,
        pending or not read yet: their directives reach the agent another way (a new session's prompt)."""
        # the start of the coordinator's encoding of each (encode_new): the id comes first
        starts = [b'{"id":' + orjson.dumps(envelope_id) + b"," for envelope_id in envelope_ids]
        self._ops += (_A, self._key(key), _item(group), _item(str(len(starts))), *map(_item, starts))

    def script_args(
        self, token: str, group: str, ttl_ms: int, version: int
    ) -> tuple[list[bytes], list[bytes]]:
        """KEYS and ARGV of :data:`COMMIT_SCRIPT` for this batch."""
        self._key(self.lease_key)
        ops = b"".join((_HEADER.pack(_ARRAY32, len(self._ops)), *self._ops))
        head = [token.encode(), group.encode(), b"%d" % ttl_ms, b"%d" % version, b"%d" % len(self.entry_ids)]
        return [key.encode() for key in self._keys], [*head, *self.entry_ids, ops]

    @property
    def empty(self) -> bool:
        return not self.entry_ids and not self._ops


def parse_result(raw: bytes | str) -> CommitResult:
    """The script's reply as a :class:`CommitResult`."""
    return CommitResult(raw.decode() if isinstance(raw, bytes) else raw)


def stored_version(value: bytes | str | None, key: str) -> int:
    """A shard's commit counter as stored (none yet: 0); another value is a :class:`DecodeError`."""
    text = (value.decode(errors="replace") if isinstance(value, bytes) else value) or "0"
    # as INCR writes it: the commit script compares the text ("07" never equals "7"), and INCR fails
    # past a signed 64-bit integer (after the batch's writes)
    if not (text.isascii() and text.isdigit() and str(int(text)) == text and int(text) < 2**63 - 1):
        raise DecodeError(f"{key} holds {text[:40]!r}, not a commit counter: the shard's state is damaged")
    return int(text)
