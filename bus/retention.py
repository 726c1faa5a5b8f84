"""Trimming streams without losing an entry that a consumer group still needs.

An entry may be removed only once every consumer group of its stream has acknowledged it: it is
neither pending (delivered, not acknowledged) nor undelivered (after the group's last-delivered id).
:func:`trim` removes the oldest entries below that floor, never more than the requested ``maxlen`` /
``minid`` allow. On servers with ``XTRIM ... ACKED`` (Redis 8.2+) the server applies the rule itself
(removing acknowledged entries behind a pending one too: the rule holds either way); elsewhere a Lua
script computes the floor and trims in one atomic step, so a group created or moved back (``XGROUP
CREATE``/``SETID``) while a trim runs cannot slip between the computation and the trim.
A group created *after* a trim at an id that was already trimmed simply starts at the oldest entry left.

A stream without consumer groups is trimmed only to an explicit ``maxlen`` / ``minid``: nothing says
which of its entries have been read (plain ``XREAD`` readers keep no state in Redis). A stream written for
one reader (signals for the coordinators, tasks for the launchers, an inbox for its adapter) whose
reader's group does not exist yet is not trimmed at all, whatever the bound: that reader has read none of
it (a cron job's ``--signals N`` before the first coordinator ran would drop signals never applied), and
another group on it, such as ``tail --group``'s, says nothing about what that reader still needs.
"""

from __future__ import annotations

import re
import weakref
from typing import Final

import click

from bus.cli_connection import redis_options, run_command
from bus.connection import Client, as_text, connect, translated
from bus.errors import CommandFailed, ConfigError, PermissionDenied
from bus.keys import ConsumerGroup, Keys, StreamKind, entry_order, open_namespace
from bus.params import COUNT
from bus.settings import Settings

__all__ = [
    "stream_id",
    "trim",
    "trim_command",
    "trim_inboxes",
    "trim_kind",
    "trim_namespace",
]

_STREAM_ID: Final = re.compile(r"^(\d{1,20})(?:-(\d{1,20}))?$")
_acked_support: weakref.WeakKeyDictionary[Client, bool] = weakref.WeakKeyDictionary()

# The consumer group each stream is written for.
_READERS: Final = {
    StreamKind.SIGNALS: ConsumerGroup.COORDINATOR.value,
    StreamKind.TASKS: ConsumerGroup.LAUNCHERS.value,
}
_INBOX_READER: Final = ConsumerGroup.ADAPTER.value

# KEYS[1] the stream; ARGV[1] "0" (keep none but what the groups need) or "", ARGV[2] minid ("ms-seq")
# or "", ARGV[3] the group the stream is written for or "", ARGV[4] the most entries to remove. Returns
# entries removed. A maxlen above 0 comes as a minid: the id of the maxlen-th newest entry (see
# _nth_newest), found before, in steps that each hold the server for a moment only. The script's own work
# is bounded by the groups it reads and by ARGV[4]: removing a few hundred thousand entries in one call
# held every other client for a tenth of a second, a few million for seconds; the caller calls again.
_TRIM_SCRIPT: Final = """
local key = KEYS[1]
if redis.call('EXISTS', key) == 0 then return 0 end
local function split(id) return string.match(id, '^(%d+)-(%d+)$') end
local function num_less(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local function less(a, b)
  local am, as = split(a)
  local bm, bs = split(b)
  if am ~= bm then return num_less(am, bm) end
  return num_less(as, bs)
end
local function incr(digits)
  local i = #digits
  while i > 0 and string.sub(digits, i, i) == '9' do i = i - 1 end
  if i == 0 then return '1' .. string.rep('0', #digits) end
  local d = tonumber(string.sub(digits, i, i)) + 1
  return string.sub(digits, 1, i - 1) .. d .. string.rep('0', #digits - i)
end
local function successor(id)
  local ms, seq = split(id)
  if seq == '18446744073709551615' then return incr(ms) .. '-0' end
  return ms .. '-' .. incr(seq)
end
local floor = nil
local reader_seen = ARGV[3] == ''
for _, g in ipairs(redis.call('XINFO', 'GROUPS', key)) do
  local f = {}
  for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
  if f['name'] == ARGV[3] then reader_seen = true end
  local candidate
  if tonumber(f['pending']) > 0 then
    candidate = redis.call('XPENDING', key, f['name'])[2]
  else
    candidate = successor(f['last-delivered-id'])
  end
  if floor == nil or less(candidate, floor) then floor = candidate end
end
if not reader_seen then return 0 end
local limit = floor
if ARGV[2] ~= '' and (limit == nil or less(ARGV[2], limit)) then limit = ARGV[2] end
if limit == nil and ARGV[1] == '' then return 0 end
local step = tonumber(ARGV[4])
local head = redis.call('XRANGE', key, '-', '+', 'COUNT', step + 1)
if #head > step and (limit == nil or less(head[#head][1], limit)) then limit = head[#head][1] end
if limit == nil then return redis.call('XTRIM', key, 'MAXLEN', '=', 0) end
return redis.call('XTRIM', key, 'MINID', '=', limit)
"""

# KEYS[1] the stream; ARGV[1] where to start ("+" or "(id"), ARGV[2] how many. The id of the oldest of
# the next ARGV[2] entries back from ARGV[1], and how many there were: only ids leave the server.
_STEP_BACK_SCRIPT: Final = """
local chunk = redis.call('XREVRANGE', KEYS[1], ARGV[1], '-', 'COUNT', ARGV[2])
if #chunk == 0 then return {'', 0} end
return {chunk[#chunk][1], #chunk}
"""
_STEP: Final = 1000
_TRIM_STEP: Final = _STEP
"""The most entries one trim script removes (a few milliseconds of the server's time)."""


def stream_id(text: str) -> str:
    """``ms`` or ``ms-seq`` as a full stream id; a :class:`ConfigError` for anything else."""
    match = _STREAM_ID.match(text)
    if match is None or int(match[1]) >= 2**64 or int(match[2] or 0) >= 2**64:
        raise ConfigError(f"{text!r} is not a stream id (ms or ms-seq)")
    return f"{int(match[1])}-{int(match[2] or 0)}"


async def trim(
    client: Client,
    stream: str,
    *,
    maxlen: int | None = None,
    minid: str | None = None,
    reader: str | None = None,
) -> int:
    """Remove old entries of ``stream`` that every consumer group has acknowledged; returns how many.

    ``maxlen`` keeps at least that many entries; ``minid`` keeps every entry from that id on. Without
    either, everything acknowledged by all groups goes. Entries pending in, or not yet delivered to, any
    group are always kept, even when that leaves more than ``maxlen``. ``reader`` names the group the
    stream is written for: while it does not exist, nothing is trimmed, whatever the bound.
    """
    if maxlen is not None and maxlen < 0:
        raise ConfigError("maxlen must be >= 0")
    try:
        return await _trim(client, stream, maxlen, stream_id(minid) if minid is not None else None, reader)
    except CommandFailed as exc:  # a key of another type, say: which one
        raise type(exc)(f"cannot trim {stream}: {exc}") from exc


async def _trim(
    client: Client, stream: str, maxlen: int | None, floor_id: str | None, reader: str | None
) -> int:
    if reader is not None and not await _read_by(client, stream, reader):
        return 0  # checked again by the script, in the step that trims (XTRIM ... ACKED cannot)
    # XTRIM takes one bound: ACKED serves a single bound, the script serves none or both.
    if (maxlen is None) != (floor_id is None) and _acked_support.get(client, True):
        removed = await _trim_acked(client, stream, maxlen, floor_id)
        if removed is not None:
            return removed
    if maxlen:
        newest_kept = await _nth_newest(client, stream, maxlen)
        if newest_kept is None:
            return 0  # no more entries than maxlen
        floor_id = newest_kept if floor_id is None else min(floor_id, newest_kept, key=entry_order)
    removed, step = 0, _TRIM_STEP
    while step == _TRIM_STEP:  # a call that removed fewer reached the bound
        with translated():
            reply = await client.eval(
                _TRIM_SCRIPT, 1, stream, "0" if maxlen == 0 else "", floor_id or "", reader or "", _TRIM_STEP
            )
        step = int(reply)
        removed += step
    return removed


async def _read_by(client: Client, stream: str, reader: str) -> bool:
    """Whether ``stream`` has the consumer group ``reader`` (a stream that does not exist has none)."""
    try:
        with translated():
            groups = await client.xinfo_groups(stream)
    except CommandFailed as exc:
        if "no such key" in str(exc).lower():
            return False
        raise
    return any(as_text(group["name"]) == reader for group in groups)


async def _nth_newest(client: Client, stream: str, n: int) -> str | None:
    """The id of the ``n``-th newest entry of ``stream`` (entries older than it are beyond ``n``); None
    when it has fewer. Found ``_STEP`` entries at a time, so that a large ``n`` never holds the server
    (one script walking a million entries kept every other client waiting for seconds)."""
    start, left, last = "+", n, ""
    while left > 0:
        with translated():
            reply = await client.eval(_STEP_BACK_SCRIPT, 1, stream, start, str(min(left, _STEP)))
        last_raw, seen = reply
        if int(seen) == 0:
            return None
        last = last_raw.decode() if isinstance(last_raw, bytes) else str(last_raw)
        left -= int(seen)
        start = f"({last}"
    return last


async def _trim_acked(client: Client, stream: str, maxlen: int | None, minid: str | None) -> int | None:
    """``XTRIM ... ACKED`` (Redis 8.2+); None when the server does not know it (remembered per client)."""
    strategy = ("MAXLEN", str(maxlen)) if maxlen is not None else ("MINID", str(minid))
    try:
        with translated():
            removed = await client.execute_command("XTRIM", stream, strategy[0], "=", strategy[1], "ACKED")
    except CommandFailed as exc:
        if "syntax" not in str(exc).lower():
            raise
        _acked_support[client] = False
        return None
    _acked_support[client] = True
    return int(removed)


async def trim_kind(client: Client, keys: Keys, kind: StreamKind, *, maxlen: int | None = None) -> int:
    """:func:`trim` the ``kind`` stream of every shard; returns the entries removed."""
    removed = 0
    for shard in keys.all_shards():
        removed += await trim(client, keys.stream(shard, kind), maxlen=maxlen, reader=_READERS.get(kind))
    return removed


async def trim_inboxes(client: Client, keys: Keys, *, maxlen: int | None = None) -> int:
    """:func:`trim` every agent inbox of the namespace (found with ``SCAN``, on every cluster node).

    An inbox is read by its adapter's consumer group, so without ``maxlen`` this removes the directives
    every adapter has acknowledged; an inbox nobody ever read keeps everything.
    """
    return await _trim_inboxes(client, await _inbox_streams(client, keys), maxlen)


async def _inbox_streams(client: Client, keys: Keys) -> list[str]:
    """The agent inboxes of the namespace (found with ``SCAN``, on every cluster node)."""
    found: list[str] = []
    for shard in keys.all_shards():
        # namespaces are [A-Za-z0-9_.-]: the key prefix holds no glob character to escape
        pattern = keys.inbox(shard, "*")
        with translated():
            names = [name async for name in client.scan_iter(match=pattern, count=1000, _type="stream")]
        found += [name.decode() if isinstance(name, bytes) else name for name in names]
    return found


async def _trim_inboxes(client: Client, streams: list[str], maxlen: int | None) -> int:
    removed = 0
    for stream in streams:
        removed += await trim(client, stream, maxlen=maxlen, reader=_INBOX_READER)
    return removed


async def trim_namespace(
    client: Client,
    keys: Keys,
    *,
    maxlen_signals: int | None,
    maxlen_events: int | None,
    maxlen_tasks: int | None = None,
    maxlen_findings: int | None = None,
    include_findings: bool = False,
    include_inboxes: bool = False,
    maxlen_inboxes: int | None = None,
    maxlen_dead: int | None = None,
) -> int:
    """Trim the signals, events and tasks streams of every shard; returns the entries removed.

    ``None`` for signals or tasks means "only what every group has acknowledged"; events are trimmed
    only down to an explicit ``maxlen_events``. Findings are the
    append-only record and are left alone unless ``include_findings`` is set; inboxes only with
    ``include_inboxes``; dead letters (read by people, usually without a group) only down to an explicit
    ``maxlen_dead``.
    """
    removed = 0
    for kind, maxlen in ((StreamKind.SIGNALS, maxlen_signals), (StreamKind.TASKS, maxlen_tasks)):
        removed += await trim_kind(client, keys, kind, maxlen=maxlen)
    if maxlen_events is not None:  # read by anyone, usually without a group: a group says little
        removed += await trim_kind(client, keys, StreamKind.EVENTS, maxlen=maxlen_events)
    if include_findings:
        removed += await trim_kind(client, keys, StreamKind.FINDINGS, maxlen=maxlen_findings)
    if include_inboxes:
        removed += await trim_inboxes(client, keys, maxlen=maxlen_inboxes)
    if maxlen_dead is not None:
        removed += await trim_kind(client, keys, StreamKind.DEAD, maxlen=maxlen_dead)
    return removed


_KEEP = COUNT


@click.command("trim")
@click.option("--signals", "signals", type=_KEEP, help="Keep at least the N newest signals per shard.")
@click.option("--events", "events", type=_KEEP, help="Keep at least the N newest events per shard.")
@click.option("--tasks", "tasks", type=_KEEP, help="Keep at least the N newest launch requests per shard.")
@click.option(
    "--inboxes/--no-inboxes", default=True, show_default=True, help="Also trim every agent's inbox."
)
@click.option("--inbox-keep", type=_KEEP, help="Keep at least the N newest directives per inbox.")
@click.option(
    "--dead",
    "dead",
    type=_KEEP,
    help="Trim the dead letters to the N newest per shard, but those a consumer group of theirs has not "
    "acknowledged (default: keep all).",
)
@click.option(
    "--findings",
    "findings",
    type=_KEEP,
    help="Trim the append-only findings stream to its N newest entries per shard, but those a consumer "
    "group of its own has not acknowledged (default: never).",
)
@redis_options
def trim_command(
    settings: Settings,
    signals: int | None,
    events: int | None,
    tasks: int | None,
    inboxes: bool,
    inbox_keep: int | None,
    dead: int | None,
    findings: int | None,
) -> None:
    """Remove stream entries that are no longer needed, and never one that is.

    Signals, tasks and inboxes lose the entries every consumer group has acknowledged (with --signals N
    etc., at least the N newest stay); an entry still pending or not yet delivered to some group always
    stays, so a running coordinator or adapter loses nothing. Signals no coordinator has read yet (its
    group does not exist), tasks no launcher has and an inbox no adapter has are not trimmed at all, whatever
    N you give. Events are for anyone, usually followed with plain XREAD, which leaves no trace: they are
    trimmed only with --events N (and never past what a group of theirs still needs). Dead letters and
    findings are kept unless you give their N: they are records for people. Safe to run from cron while
    everything runs; needs a Redis user allowed XTRIM, EVAL and SCAN on the namespace (an
    administrator's: no acl role may run a whole trim). Each stream kind is reported as it is done.
    """
    if inbox_keep is not None and not inboxes:
        raise click.UsageError("--inbox-keep keeps directives of the inboxes that --no-inboxes leaves alone")

    async def main() -> None:
        client = await connect(settings)
        try:
            # not created here: a trim from cron must not fix the shard count before the coordinator does
            keys = await open_namespace(client, settings.namespace, settings.shards, create=False)
            plan = [(StreamKind.SIGNALS, signals), (StreamKind.TASKS, tasks)]
            if events is not None:
                plan.append((StreamKind.EVENTS, events))
            if dead is not None:
                plan.append((StreamKind.DEAD, dead))
            if findings is not None:
                plan.append((StreamKind.FINDINGS, findings))
            try:
                # found first: a user who may not SCAN is refused before anything is trimmed
                streams = await _inbox_streams(client, keys) if inboxes else []
                # said as each is done: a later step that fails must not hide what the earlier removed
                for kind, n in plan:
                    click.echo(
                        f"{kind.value}: {await trim_kind(client, keys, kind, maxlen=n)} entries removed"
                    )
                if inboxes:
                    click.echo(f"inboxes: {await _trim_inboxes(client, streams, inbox_keep)} entries removed")
            except PermissionDenied as exc:
                raise PermissionDenied(f"{exc}; trim runs as an administrator") from exc
        finally:
            await client.aclose()

    run_command(main())
