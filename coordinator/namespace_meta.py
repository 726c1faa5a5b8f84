"""The namespace's meta key, which holds its shard count, as running coordinators keep it.

A server restarted without its data under running coordinators has lost the key: the next command would
create the namespace anew, perhaps with another count, and the views would read other shards than the
coordinators. Each coordinator writes it back, and says so; a count other than its own (a command
created the namespace anew meanwhile) is an error it reports once per change.
"""

from __future__ import annotations

import logging

from bus.connection import Client, as_text, translated
from bus.keys import Keys

__all__ = ["NamespaceMeta"]

log = logging.getLogger("subagent_bus.coordinator")


class NamespaceMeta:
    """The meta key of the namespace of ``keys``, whose shard count a coordinator runs."""

    def __init__(self, client: Client, keys: Keys) -> None:
        self.client = client
        self.keys = keys
        self._seen = str(keys.shards)
        """The shard count the key held when last read."""

    async def keep(self) -> None:
        """Write the shard count back when the server lost it; report a count other than this
        coordinator's, once per change."""
        key, count = self.keys.meta, str(self.keys.shards)
        with translated():
            if await self.client.set(key, count, nx=True):
                log.warning("%s was missing (the server lost its data?): written back: %s shards", key, count)
                return
            stored = as_text(await self.client.get(key) or b"")
        if stored not in (count, self._seen):  # said once per change
            log.error(
                "%s says %r shards while this coordinator runs %s: a command created the namespace anew "
                "after the server lost it; views and adapters now use that count (restart everything with "
                "one count)",
                key,
                stored,
                count,
            )
        self._seen = stored
