"""The Redis ACL rules of the five roles of a namespace: adapter, coordinator, launcher, observer, human.

Each role gets the commands it runs and the keys it touches, nothing else (:mod:`bus.acl` turns the
rules into users and installs them). The rules use Redis 7 key permissions (``%R~`` read-only, ``%W~``
write-only) and selectors (``(...)``: a command is allowed when the root rules or one selector allow it
together with every key it names, so a command can be granted on some keys only). They need Redis 7.0+
or Valkey 7.2+.

Every role (the root rules): the connection commands (``+@connection -@dangerous``) minus ``SELECT``
(ACLs are not per database, so users stay in the database of their URL's default, 0) and ``CLIENT
TRACKING`` (broadcast tracking would report key names of every namespace), plus ``INFO`` (``connect``
asks ``INFO cluster`` to choose the cluster client) and ``CLUSTER SLOTS|SHARDS`` (the cluster client's
topology). No role has any other command without keys, so none can reach beyond its namespace through
``FLUSHALL``, ``SCAN``, ``KEYS``, ``RANDOMKEY``, ``FUNCTION FLUSH``, ``CONFIG``, ``ACL`` or ``SHUTDOWN``,
and none has a pub/sub channel.

- adapter: ``XADD`` to the signals and dead-letter streams, write-only (it cannot read what other agents
  published); on inboxes only what its consumer group ``adapter`` needs (``XGROUP CREATE``,
  ``XREADGROUP``, ``XAUTOCLAIM``, ``XCLAIM``, ``XPENDING``, ``XACK``); ``GET``/``SET`` of its checkpoints
  (``offset:*``, ``import:*``); ``GET`` of the namespace's meta key; ``MULTI``/``EXEC`` (a batch and its
  checkpoint are one transaction). No access at all to findings, events, tasks, state or leases.
- coordinator: its namespace's streams (read, ``XADD``, its consumer group's commands, and ``XCLAIM`` in
  the inboxes, for the directives a relaunch carries in its prompt), ``XTRIM`` of the
  signals, events and tasks streams only, the group states (hashes, sets, lists, and ``DEL`` of a retired
  group's), the leases (``GET``, ``SET``, ``PEXPIRE``, ``PTTL``, ``DEL``), the meta key, the members set, and
  ``EVAL``/``EVALSHA``/``SCRIPT LOAD`` (a script runs with the caller's permissions, command by command).
  Commands that remove or overwrite a key whatever its type (``DEL``, ``SET``, ``PEXPIRE``) are granted on
  the group state, lease and meta keys only (never on a stream), and no role has ``XDEL``, ``XSETID`` or
  ``XGROUP DESTROY``: the findings stream is append-only for everyone.
- launcher: its consumer group ``launchers`` on the tasks streams, ``XADD`` (write-only) to the
  dead-letter streams, ``GET`` of the meta key. The adapters it starts have adapter credentials.
- observer: ``+@read`` on every key of the namespace with read-only key permissions, minus the commands
  that list key names of every namespace (``SCAN``, ``RANDOMKEY``, ``DBSIZE``; ``KEYS`` is
  ``@dangerous``). No write of any kind, not even ``XREADGROUP`` (its pending list is a write):
  observers follow streams with plain ``XRANGE``/``XREAD`` cursors (``status``, ``inbox``,
  ``findings``, ``replay``, ``tail`` without ``--group``).
- human: a person at the command line. The observer's rules, plus ``XADD`` to the signals streams with
  write-only key permission: ``answer``, ``resolve``, ``recover``, ``approve``, ``deny`` and ``dismiss``
  read the meta key (``GET``) and the committed group states (``SISMEMBER``, ``SMEMBERS``, ``HGETALL``),
  then append one ``human`` envelope to the signals stream of the group's shard; the coordinator applies
  it and writes the directive it leads to. Nothing else: no consumer group, no ``XADD`` to the inboxes,
  tasks, findings, events or dead-letter streams, no state key, no ``DEL``. ``trim`` (``SCAN`` for the
  inboxes, ``XTRIM``) stays an administrator's command.

Only the coordinator may write the meta key, so a coordinator (or an administrator) creates the
namespace; the other roles read its shard count.

Why the patterns cannot reach another namespace: Redis ACL patterns are globs where only ``* ? [ ] \\``
are special (braces are literal), and a namespace matches ``[A-Za-z0-9_.-]+``, so it is taken literally.
Every shard key of ``ns`` starts with ``{ns:`` followed by the shard number, and shard keys are matched
with one pattern per number of digits (``{ns:[0-9]}:signals`` ... ``{ns:[0-9][0-9][0-9][0-9][0-9]}:signals``),
so a pattern for one kind of key never matches another kind (an agent id holding ``}:signals`` makes an
inbox key that still is no signals stream). Another namespace ``other`` has keys ``{other:``, ``{other}:``
and ``other:coordinators``; none starts with ``{ns:``, ``{ns}:`` or equals ``ns:coordinators`` unless
``other == ns``, because a namespace has no ``:`` or ``}``.

What ACLs cannot express: a command's options, or what an entry holds. ``XADD ... MAXLEN 0`` (or
``MINID``) trims the stream it appends to, so an adapter or a human can trim a shard's signals stream and
the coordinator any stream it appends to; the coordinator's consumer group still holds every delivered
entry's id and dead-letters an entry deleted before it was applied. An adapter or a human may append any
envelope to a signals stream, not only its own kind (the coordinator applies each by its rules, whoever
sent it). Adapters share the inboxes of their namespace (one user per agent would be needed to separate
them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from enum import StrEnum
from typing import Final

from bus.keys import Keys, meta_key
from bus.settings import MAX_SHARDS

__all__ = ["Role", "role_rules"]

_SHARD_DIGITS: Final = len(str(MAX_SHARDS - 1))
_ROOT: Final = (
    "+@connection",
    "-@dangerous",
    "-select",
    "-client|tracking",
    "+info",
    "+cluster|slots",
    "+cluster|shards",
)
_TRANSACTION: Final = ("+multi", "+exec", "+discard")
_GROUP_READER: Final = ("+xgroup|create", "+xreadgroup", "+xautoclaim", "+xclaim", "+xpending", "+xack")
"""A consumer group's reader: ``XCLAIM`` too, which ``listen`` takes a dead reader's entry with and a
delivering adapter keeps its own fresh with."""
_STREAMS: Final = ("signals", "events", "tasks", "findings", "dead", "inbox:*")
_TRIMMED: Final = ("signals", "events", "tasks")
_CHECKPOINTS: Final = ("offset:*", "import:*")
"""State keys of the adapters: file offsets (``adapter watch``) and ``adapter import-findings`` progress."""


class Role(StrEnum):
    """Who connects: each role is one ACL user per namespace."""

    ADAPTER = "adapter"
    COORDINATOR = "coordinator"
    LAUNCHER = "launcher"
    OBSERVER = "observer"
    HUMAN = "human"


def _shard_keys(namespace: str, suffix: str, perm: str = "~") -> list[str]:
    """``perm`` patterns matching ``{ns:<shard>}:<suffix>`` for every shard number, and nothing else."""
    return [f"{perm}{{{namespace}:{'[0-9]' * n}}}:{suffix}" for n in range(1, _SHARD_DIGITS + 1)]


def _selector(*rules: str | Iterable[str]) -> str:
    flat = [rule for item in rules for rule in ([item] if isinstance(item, str) else item)]
    return "(" + " ".join(flat) + ")"


def _keys(namespace: str, suffixes: Sequence[str], perm: str = "~") -> list[str]:
    return [pattern for suffix in suffixes for pattern in _shard_keys(namespace, suffix, perm)]


def _adapter(ns: str) -> list[str]:
    return [
        *_ROOT,
        *_TRANSACTION,
        _selector(_keys(ns, ("signals", "dead"), "%W~"), "+xadd"),
        _selector(_keys(ns, ("inbox:*",)), _GROUP_READER),
        _selector(_keys(ns, _CHECKPOINTS), "+get", "+set"),
        _selector(f"%R~{meta_key(ns)}", "+get"),
    ]


def _launcher(ns: str) -> list[str]:
    return [
        *_ROOT,
        *_TRANSACTION,
        "+time",  # a request's expiry is in the server's time (the coordinators' ticks)
        _selector(_keys(ns, ("tasks",)), _GROUP_READER),
        _selector(_keys(ns, ("dead",), "%W~"), "+xadd"),
        _selector(f"%R~{meta_key(ns)}", "+get"),
    ]


def _coordinator(ns: str) -> list[str]:
    members = f"~{ns}:coordinators"
    stream_commands = (
        "+xadd", "+xack", "+xautoclaim", "+xgroup|create", "+xpending", "+xreadgroup",
        "+xrange", "+xrevrange", "+xread", "+xlen", "+xinfo|stream", "+xinfo|groups",
        "+xinfo|consumers", "+exists", "+type",
    )  # fmt: skip
    state_commands = (
        "+hset", "+hdel", "+hget", "+hgetall", "+hscan", "+sadd", "+srem", "+smembers", "+sismember",
        "+rpush", "+ltrim", "+lrange", "+del", "+type",
    )  # fmt: skip
    return [
        *_ROOT,
        "+time",
        "+script|load",
        "+script|exists",
        # The keys a script declares must all fit one selector; its commands are checked one by one.
        _selector(_keys(ns, ("*",)), members, "+eval", "+evalsha"),
        _selector(_keys(ns, _STREAMS), stream_commands),
        _selector(_keys(ns, _TRIMMED), "+xtrim"),
        # the directives a relaunch's prompt carries are acknowledged unread, and the unread ones among
        # them it does not carry are left pending for the next reader, idle (coordinator.commit)
        _selector(_keys(ns, ("inbox:*",)), "+xclaim"),
        _selector(_keys(ns, ("signals",)), "+xgroup|delconsumer"),  # idle consumers of dead processes
        _selector(_keys(ns, ("group:*", "merged:*", "seen:*", "groups", "retired")), state_commands),
        # PTTL: a burst run waits out the lease of a coordinator that died, as long as it has left
        _selector(_keys(ns, ("lease",)), "+get", "+set", "+pexpire", "+pttl", "+del"),
        _selector(_keys(ns, ("version",)), "+get", "+incr"),
        _selector(f"~{meta_key(ns)}", "+get", "+set"),
        _selector(members, "+zadd", "+zrem", "+zremrangebyscore", "+zcard", "+zrange"),
    ]


def _observer(ns: str) -> list[str]:
    return [
        *_keys(ns, ("*",), "%R~"),
        f"%R~{meta_key(ns)}",
        f"%R~{ns}:coordinators",
        "+@read",
        *_ROOT,
        "+time",  # whether a coordinator's membership expired, by the server's clock (`status`)
        "-scan",
        "-randomkey",
        "-dbsize",
    ]


def _human(ns: str) -> list[str]:
    # Publisher.publish: one XADD to the signals stream of the envelope's shard, nothing else written.
    return [*_observer(ns), _selector(_keys(ns, ("signals",), "%W~"), "+xadd")]


_RULES: Final[dict[Role, Callable[[str], list[str]]]] = {
    Role.ADAPTER: _adapter,
    Role.COORDINATOR: _coordinator,
    Role.LAUNCHER: _launcher,
    Role.OBSERVER: _observer,
    Role.HUMAN: _human,
}


def role_rules(role: Role, namespace: str) -> list[str]:
    """The permission rules of ``role`` in ``namespace`` (no ``reset``, state or password)."""
    Keys(namespace, 1)  # validates the namespace: ConfigError unless [A-Za-z0-9_.-]+
    return _RULES[role](namespace)
