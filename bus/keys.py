"""The key layout: every key of one shard shares the hash tag ``{ns:s}``.

A Redis Cluster hashes only the part between the first ``{`` and ``}``, so a shard's streams, inboxes
and state keys sit in one slot and one transaction can touch them all, on a cluster as on one server::

    {ns:s}:signals  {ns:s}:findings  {ns:s}:events  {ns:s}:tasks  {ns:s}:dead
    {ns:s}:inbox:<agent>             {ns:s}:<state name>
    {ns}:meta                        the namespace's shard count, fixed when it is created

``s = crc32(group_id) % shards``: every entry of a task group lands in the same shard.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from bus.connection import Client, translated
from bus.errors import ConfigError, NamespaceMissing, PermissionDenied
from bus.settings import MAX_NAMESPACE_CHARS, MAX_SHARDS, NAMESPACE_PATTERN

__all__ = [
    "AGENT_FIELD",
    "ConsumerGroup",
    "Keys",
    "StreamKind",
    "agent_field",
    "dead_stream_for",
    "entry_order",
    "meta_key",
    "open_namespace",
]

_NAMESPACE: Final = re.compile(NAMESPACE_PATTERN)
DEFAULT_SHARDS: Final = 8


class StreamKind(StrEnum):
    """The streams of a shard."""

    SIGNALS = "signals"
    FINDINGS = "findings"
    EVENTS = "events"
    TASKS = "tasks"
    DEAD = "dead"


class ConsumerGroup(StrEnum):
    """The consumer groups the bus's own readers share: an entry one of them acknowledges is done."""

    COORDINATOR = "coordinator"
    """Every coordinator, on every shard's signals stream."""
    LAUNCHERS = "launchers"
    """Every launcher, on every shard's tasks stream."""
    ADAPTER = "adapter"
    """An agent's adapters (or ``listen``), on its inbox."""


@dataclass(frozen=True, slots=True)
class Keys:
    """The names of every key of a namespace split into ``shards`` shards."""

    namespace: str
    shards: int

    def __post_init__(self) -> None:
        if not _NAMESPACE.match(self.namespace):
            raise ConfigError(f"namespace {self.namespace!r} must match {NAMESPACE_PATTERN}")
        if len(self.namespace) > MAX_NAMESPACE_CHARS:
            raise ConfigError(f"namespace {self.namespace!r} has more than {MAX_NAMESPACE_CHARS} characters")
        if not 1 <= self.shards <= MAX_SHARDS:
            raise ConfigError(f"shard count {self.shards} is outside 1..{MAX_SHARDS}")

    def shard_of(self, group_id: str) -> int:
        """The shard of a task group: ``crc32(group_id) % shards`` (zlib's crc32 of the UTF-8 bytes)."""
        return zlib.crc32(group_id.encode()) % self.shards

    def all_shards(self) -> range:
        return range(self.shards)

    def tag(self, shard: int) -> str:
        """The hash tag of a shard, braces included: ``{ns:s}``."""
        if not 0 <= shard < self.shards:
            raise ValueError(f"shard {shard} is outside 0..{self.shards - 1}")
        return f"{{{self.namespace}:{shard}}}"

    def stream(self, shard: int, kind: StreamKind) -> str:
        return f"{self.tag(shard)}:{kind.value}"

    def inbox(self, shard: int, agent_id: str) -> str:
        """The directive stream of one agent, in the shard of its task group."""
        if not agent_id:
            raise ValueError("an inbox needs an agent id")
        return f"{self.tag(shard)}:inbox:{agent_id}"

    def state(self, shard: int, name: str) -> str:
        """A state key of the shard (groups, lease, offsets...)."""
        if not name:
            raise ValueError("a state key needs a name")
        return f"{self.tag(shard)}:{name}"

    def groups(self, shard: int) -> str:
        """The set of the ids of the groups whose state the coordinators keep on the shard."""
        return self.state(shard, "groups")

    def group(self, shard: int, group_id: str) -> str:
        """The hash of one group's state: its own fields, and one per agent (:func:`agent_field`)."""
        return self.state(shard, f"group:{group_id}")

    @property
    def meta(self) -> str:
        return meta_key(self.namespace)


AGENT_FIELD: Final = "a:"
"""The prefix of an agent's field in its group's state hash (:meth:`Keys.group`)."""


def agent_field(agent_id: str) -> str:
    """The field of an agent's record in its group's state hash."""
    return f"{AGENT_FIELD}{agent_id}"


def meta_key(namespace: str) -> str:
    """The key holding a namespace's shard count."""
    return f"{{{namespace}}}:meta"


def entry_order(entry_id: str) -> tuple[int, int]:
    """A stream entry id (``ms-seq``, or ``ms`` alone) as a sort key: ids compare as numbers, not text."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def dead_stream_for(stream: str) -> str:
    """The dead-letter stream that goes with ``stream``: ``{tag}:dead`` when it has a hash tag.

    Sharing the tag keeps the dead-letter write in the stream's slot (one transaction on a cluster).
    """
    start = stream.find("{")
    end = stream.find("}", start + 1)
    if start != -1 and end > start + 1:
        return f"{stream[: end + 1]}:{StreamKind.DEAD.value}"
    return f"{stream}:{StreamKind.DEAD.value}"


async def open_namespace(
    client: Client, namespace: str, shards: int | None = None, *, create: bool = True
) -> Keys:
    """The keys of ``namespace``, creating it with ``shards`` shards (8 when none) if it does not exist.

    The shard count is fixed at creation (``SET {ns}:meta <shards> NX``): moving every key to new shards
    is not something a connecting process may do. So asking for a count that differs from an existing
    namespace's is a :class:`ConfigError`; ``shards=None`` takes whatever the namespace has.
    ``create=False`` (readers, whose mistyped ``--namespace`` must not fix a count before the
    coordinator does) raises :class:`NamespaceMissing` instead of creating it.
    """
    key = meta_key(namespace)
    Keys(namespace, shards or DEFAULT_SHARDS)  # validates the name before anything is written
    with translated():
        # Read first: read-only roles (adapters, observers) may GET the meta key but not SET it.
        stored = await client.get(key)
        if stored is None and not create:
            raise NamespaceMissing(
                f"namespace {namespace!r} does not exist on this server (no {key}): check --namespace, "
                "or start what creates it (a coordinator, an adapter) first"
            )
        if stored is None:
            try:
                with translated():
                    await client.set(key, str(shards or DEFAULT_SHARDS), nx=True)
            except PermissionDenied:
                raise NamespaceMissing(
                    f"namespace {namespace!r} does not exist on this server (no {key}), and this user may "
                    "not create it: under ACLs only the coordinator role's user does (start a coordinator "
                    "as that user first)"
                ) from None
            stored = await client.get(key)
    text = stored.decode(errors="replace") if isinstance(stored, bytes) else str(stored)
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_SHARDS:
        raise ConfigError(f"{key} holds {text[:40]!r}, not a shard count: the namespace is damaged")
    if shards is not None and int(text) != shards:
        raise ConfigError(
            f"namespace {namespace!r} has {text} shards, not {shards}: the count is fixed when a namespace "
            "is created (leave --shards out to use it as it is, or choose another --namespace)"
        )
    return Keys(namespace, int(text))
