"""The pending list of an agent's inbox as a listener sees it: what it may take over, and what it waits for.

Listeners (the consumer ``listen``) and delivering adapters (the consumer ``adapter``) read the inbox in
one consumer group (:data:`agents.delivery.GROUP`). Before it reads a new entry, a listener needs three
things of the group's pending list: the entries a dead listener left (pending under ``listen`` for the
claim idle time), the entries a dead adapter left (pending under ``adapter`` for
:data:`agents.delivery.ABANDONED_MS`; a live adapter keeps the one it delivers fresh), and how long the
oldest entry held under ``listen`` has been idle (while a listener prints it, newer directives wait).

``XPENDING key group start end count`` over the whole group answers all three in one call: it lists the
oldest pending entries with the consumer that holds each, its idle time and its delivery count. The
list is read from its oldest entry on; another page is read only when one came back full and could still
be hiding entries to claim (more than a page pending: an adapter of an earlier version held a whole read
batch of directives behind the one it delivered), so what is found is what a query per consumer would
have found.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field
from typing import Any, Final

from agents.delivery import GROUP
from bus.connection import Client, as_text, translated

__all__ = ["CONSUMER", "InboxPending", "hand_on"]

CONSUMER: Final = "listen"
"""The consumer name of every listener (and of the MCP server's ``wait_for_directive``)."""
_CLAIM_COUNT: Final = 10  # stale entries of each kind a listener tries per round
_PAGE: Final = 100


async def hand_on(client: Client, inbox: str, entry_id: str, deliveries: int) -> None:
    """Leave an entry read by this reader, another group's directive, pending under ``listen`` for that
    group's listener or adapter, its read undone in the delivery count (``deliveries``, this read
    included): handed on each time it is read, it must count against nothing, as its own group's adapter
    gives a directive read too often up."""
    with translated():
        await client.xclaim(
            inbox, GROUP, CONSUMER, 0, [entry_id], justid=True, retrycount=max(deliveries - 1, 0)
        )


@dataclass
class InboxPending:
    """What a listener needs of the inbox group's pending list, gathered from the oldest entry on."""

    stale: list[tuple[str, int]] = field(default_factory=list)
    """Up to ten entries (id, deliveries so far), oldest first, pending under ``listen`` for the claim
    idle time: a dead listener's."""
    abandoned: list[tuple[str, int]] = field(default_factory=list)
    """Up to ten entries, oldest first, pending under ``adapter`` for the abandoned time: a dead
    adapter's."""
    held_idle_ms: int | None = None
    """How long the oldest entry pending under ``listen`` has been idle; None when there is none."""

    @classmethod
    async def read(
        cls, client: Client, inbox: str, *, claim_idle_ms: int, abandoned_ms: int, skip: Container[str] = ()
    ) -> InboxPending:
        """Look at the pending list of ``inbox``: one ``XPENDING`` unless a page comes back full. The
        entries of ``skip`` (another group's, left) count for nothing."""
        pending = cls()
        start = "-"
        while True:
            with translated():
                page: list[Any] = await client.xpending_range(inbox, GROUP, min=start, max="+", count=_PAGE)
            for record in page:
                if as_text(record["message_id"]) in skip:
                    continue
                pending._add(
                    as_text(record["message_id"]),
                    as_text(record["consumer"]),
                    int(record["time_since_delivered"]),
                    int(record["times_delivered"]),
                    claim_idle_ms=claim_idle_ms,
                    abandoned_ms=abandoned_ms,
                )
            if len(page) < _PAGE or pending._full():
                return pending
            start = "(" + as_text(page[-1]["message_id"])  # exclusive: the entries after it

    def _add(
        self,
        entry_id: str,
        consumer: str,
        idle_ms: int,
        deliveries: int,
        *,
        claim_idle_ms: int,
        abandoned_ms: int,
    ) -> None:
        # idle times as XPENDING's and XCLAIM's own IDLE checks count them: at least the time is stale
        if consumer == CONSUMER:
            if self.held_idle_ms is None:
                self.held_idle_ms = idle_ms
            if idle_ms >= claim_idle_ms and len(self.stale) < _CLAIM_COUNT:
                self.stale.append((entry_id, deliveries))
        elif consumer == GROUP and idle_ms >= abandoned_ms and len(self.abandoned) < _CLAIM_COUNT:
            self.abandoned.append((entry_id, deliveries))

    def _full(self) -> bool:
        """Whether the entries further on could change nothing: as many of each kind as are tried."""
        return len(self.stale) == _CLAIM_COUNT and len(self.abandoned) == _CLAIM_COUNT
