"""Following an agent's inbox: each directive delivered, acknowledged once delivered, and given up on
after its attempts (the parent then told, see :class:`InboxFollower`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Final

from agents.adapter import MARK_TTL_S, AgentBus
from agents.delivery import (
    GROUP,
    HOLD_REFRESH_S,
    AgentDone,
    Deliverer,
    DeliveryFailed,
    Directive,
    as_directive,
    not_a_directive,
)
from agents.inbox_pending import hand_on
from agents.lost import undelivered
from bus.connection import translated
from bus.consumer import Ack, Consumer, Delivery
from bus.envelope import deterministic_id, new_envelope
from bus.errors import BusError
from bus.metrics import AdapterMetrics
from bus.waits import wait_for

__all__ = ["GivenUp", "InboxFollower", "with_inbox"]

_LISTENER_READS: Final = 50
"""Reads of a directive beyond its attempts (listeners killed before they printed it, each a delivery in
the stream's count) before it is given up on unattempted."""
_UNCOUNTED: Final = 2**62
"""The consumer's own limit, never reached: the follower counts (another group's directive is read again
and again, handed on each time, and is not its to give up on)."""

GivenUp = Callable[[Directive, str], Awaitable[None]]
"""Told of a directive given up on and why, before it is dead-lettered."""


class InboxFollower:
    """Delivers the directives of one agent's inbox, acknowledging each once delivered.

    A directive is tried ``attempts`` times (counted by ``attempted``, each before it is made), and given
    up on unattempted after ``attempts`` + :data:`_LISTENER_READS` reads. The consumer is to allow more
    deliveries than that: a directive whose last attempt was cut short (the adapter killed, the server
    lost before the failure was settled) comes back once more and is given up on then, so ``given_up``
    hears of every directive given up on, at least once, before it is dead-lettered; another group's
    directive, handed on each time it is read, is never given up on here.
    """

    def __init__(
        self,
        consumer: Consumer,
        deliverer: Deliverer,
        *,
        attempts: int,
        given_up: GivenUp | None = None,
        log: Callable[[str], None],
        warn: Callable[[str], None] | None = None,
        metrics: AdapterMetrics | None = None,
        attempted: Callable[[Delivery], Awaitable[int]] | None = None,
        group_id: str | None = None,
    ) -> None:
        self.consumer = consumer
        self.group_id = group_id
        """The agent's group: another group's directive is left to that group's readers (None: any)."""
        self._left: set[str] = set()
        self.attempted = attempted
        """Counts an attempt at a directive and says which one it is, apart from the stream's count of
        its deliveries, which the reads of `listen` and the MCP server in the same group raise too (None:
        that count)."""
        self.deliverer = deliverer
        self.attempts = attempts
        self.given_up = given_up
        self.log = log
        self.warn = warn or log
        """What went wrong (a failed delivery), said at a level of its own."""
        self.metrics = metrics
        self.delivered = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Follow the inbox until ``stop``; an unreachable server is waited for, not fatal."""
        while not stop.is_set():
            try:
                await self.consumer.ensure_group("0")
                await self.consumer.run(self.handle, stop=stop)
            except BusError as exc:
                self.warn(f"inbox {self.consumer.stream}: {exc}; retrying")
                await wait_for(stop, 1.0)

    async def _holding(self, delivery: Delivery, work: Awaitable[None]) -> None:
        """Run ``work`` while the entry is made fresh every :data:`HOLD_REFRESH_S` (it may take minutes)."""

        async def refresh() -> None:
            while True:
                await asyncio.sleep(HOLD_REFRESH_S)
                try:
                    await self.consumer.hold(delivery)
                except BusError as exc:  # the next refresh tries again; ABANDONED_MS leaves room
                    self.warn(f"inbox {self.consumer.stream}: {exc}")

        refresher = asyncio.create_task(refresh())
        try:
            await work
        finally:
            refresher.cancel()

    async def handle(self, delivery: Delivery) -> Ack | tuple[Ack, str]:
        directive = await self._directive(delivery)
        if not isinstance(directive, Directive):
            return directive
        envelope = directive.envelope
        if delivery.deliveries > self.attempts + _LISTENER_READS:
            why = (
                f"it was read {delivery.deliveries} times and never delivered (listeners stopped before "
                "they printed it)"
            )
            self.warn(f"delivering {directive.type.value} {envelope.id}: {why}")
            return await self._give_up(directive, why)
        attempt = delivery.deliveries if self.attempted is None else await self.attempted(delivery)
        if attempt > self.attempts:
            why = (
                f"its attempt {self.attempts} of {self.attempts} was cut short (the adapter stopped, or lost "
                "the server, before it was settled), and whether it reached the agent is not known"
            )
            self.warn(f"delivering {directive.type.value} {envelope.id}: {why}")
            return await self._give_up(directive, why)
        try:
            await self._holding(delivery, self.deliverer.deliver(directive))
        except AgentDone as exc:
            self.log(f"{directive.type.value} {envelope.id} not delivered: {exc}")
            return Ack.ACK
        except DeliveryFailed as exc:
            which = f"attempt {attempt} of {self.attempts}"
            self.warn(f"delivering {directive.type.value} {envelope.id} failed ({which}): {exc}")
            if self.metrics is not None:
                self.metrics.delivery_failures.labels(directive.type.value).inc()
            if attempt >= self.attempts:
                return await self._give_up(directive, f"{exc} ({which})")
            raise
        self.delivered += 1
        if self.metrics is not None:
            self.metrics.delivered.labels(directive.type.value).inc()
        self.log(f"delivered {directive.type.value} {envelope.id} ({self.deliverer.name})")
        return Ack.ACK

    async def _directive(self, delivery: Delivery) -> Directive | Ack | tuple[Ack, str]:
        """The directive to deliver, or what becomes of an entry that is none of this agent's."""
        envelope = delivery.envelope
        if envelope is None:
            return Ack.DEAD
        directive = as_directive(envelope)
        if directive is None:
            why = not_a_directive(envelope)
            self.warn(f"inbox {self.consumer.stream}: {why}; dead-lettered")
            return Ack.DEAD, why
        if self.group_id is not None and envelope.group_id != self.group_id:
            return await self._leave(delivery, envelope.group_id)
        return directive

    async def _leave(self, delivery: Delivery, group_id: str) -> Ack:
        """Hand another group's directive to the ``listen`` consumer, for that group's listener or adapter
        (one agent id in two groups of a shard has one inbox there; anyone with the adapter's user may add
        an entry): delivered here, it would resume another agent than its own. Said once."""
        if delivery.entry_id not in self._left:
            self._left.add(delivery.entry_id)
            self.warn(
                f"inbox {self.consumer.stream}: the directive {delivery.entry_id} is for group {group_id!r}, "
                f"not {self.group_id!r}: left for a listener or adapter of that group"
            )
        await hand_on(self.consumer.client, self.consumer.stream, delivery.entry_id, delivery.deliveries)
        return Ack.RETRY

    async def _give_up(self, directive: Directive, why: str) -> tuple[Ack, str]:
        """Tell ``given_up``, then have the directive dead-lettered (a failure to tell is a retry)."""
        self.warn(
            f"{directive.type.value} {directive.envelope.id} given up: it goes to the dead letters "
            "(`subagent-bus tail --stream dead`)"
        )
        if self.given_up is not None:
            await self.given_up(directive, why)
        return Ack.DEAD, f"not delivered ({self.deliverer.name}): {why}"


async def with_inbox(
    bus: AgentBus, deliverer: Deliverer | None, work: Awaitable[int], *, attempts: int, retry_ms: int
) -> int:
    """Run ``work`` while the agent's directives are delivered (``attempts`` tries each, ``retry_ms``
    apart), the parent told of one given up on; stop delivering once it is done."""
    if deliverer is None:
        return await work
    consumer = Consumer(
        bus.client,
        bus.inbox,
        GROUP,
        GROUP,
        block_ms=250,
        reclaim_idle_ms=retry_ms,
        max_deliveries=_UNCOUNTED,  # the follower counts: attempts (attempted) and reads
        batch=1,  # a directive read along with the one being delivered would look abandoned to listen
    )

    async def given_up(directive: Directive, why: str) -> None:
        if bus.completed:  # nothing waits for it (a delivery would have been refused: AgentDone)
            return
        # Published with a mark, in one transaction: an adapter killed before the dead letter gives the
        # directive up again after its restart, maybe long after the idempotency window forgot the id.
        # (Under offset:, the adapter's checkpoints, which its ACL role may read and write.)
        told = bus.state_key(f"offset:{bus.agent_id}:undelivered:{directive.envelope.id}")
        with contextlib.suppress(BusError), translated():  # unknown: told, as before, maybe twice
            if await bus.client.get(told) is not None:
                return
        stop = undelivered(bus.agent_id, directive.type.value, directive.envelope.id, deliverer.name, why)
        id = deterministic_id(bus.agent_id, f"undelivered:{directive.envelope.id}", 0)
        bus.warn(f"{directive.type.value} {directive.envelope.id}: the parent is told (a STOP_WORK error)")
        await bus.publish(
            [new_envelope(stop, agent_id=bus.agent_id, group_id=bus.group_id, source="deliver", id=id)],
            state={told: b"1"},
            state_ttl_s=MARK_TTL_S,
        )

    async def attempted(delivery: Delivery) -> int:
        # GET and SET: the adapter's ACL role may not INCR; one adapter holds the entry meanwhile
        key = bus.state_key(f"offset:{bus.agent_id}:attempts:{delivery.entry_id}")
        with translated():
            before = await bus.client.get(key)
            attempt = (int(before) if before is not None and before.isdigit() else 0) + 1
            await bus.client.set(key, str(attempt), ex=MARK_TTL_S)
        return attempt

    follower = InboxFollower(
        consumer,
        deliverer,
        attempts=attempts,
        given_up=given_up,
        log=bus.log,
        warn=bus.warn,
        metrics=bus.metrics,
        attempted=attempted,
        group_id=bus.group_id,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(follower.run(stop))
    try:
        return await work
    finally:
        stop.set()
        await task
