"""Taking directives from an agent's inbox: the reader of ``subagent-bus listen`` (:mod:`agents.listen`)
and of the MCP tool ``wait_for_directive`` (:mod:`agents.mcp_server`).

Consumer group. The listener reads the inbox in the same consumer group as the adapters' deliveries
(:data:`agents.delivery.GROUP`, ``adapter``): every way of handing a directive to the agent shares one
group, so each directive is taken by exactly one of them. With a group of its own the listener would
receive every directive a delivering adapter of the same agent also receives, and the agent would be
resumed twice.

Consumer name. Every listener of an agent is the consumer ``listen`` (the inbox is already per agent).
New entries are read with ``XREADGROUP ... >`` and ``COUNT 1``, which hands each entry to one reader only,
so two racing listeners never both receive it. An entry is acknowledged only after it was written out
and stdout flushed; a listener that dies between reading and printing leaves it pending under ``listen``.
The next listener claims such entries with ``XCLAIM`` once they have been idle for ``claim_idle_ms``
(2 s by default): a live listener holds an entry for the milliseconds a print takes, so it is never
robbed, and ``XCLAIM``'s own idle check makes two claimers race safely. Until then no listener reads a
newer entry, so a listener restarted the moment after a kill still prints the older directive first.

An adapter delivering a directive (running a resume command, or waiting for its agent's turn to end first)
may hold it for minutes, and keeps it fresh meanwhile (:data:`agents.delivery.HOLD_REFRESH_S`); one it has
left for :data:`agents.delivery.ABANDONED_MS` (a minute) belongs to an adapter that died, and a listener
takes it over, as a restarted adapter would. Both kinds of stale entry, and the entry held under
``listen``, are found by one look at the group's pending list per poll (:mod:`agents.inbox_pending`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from agents.adapter import stderr_log
from agents.delivery import ABANDONED_MS, GROUP, Directive, as_directive, not_a_directive
from agents.inbox_pending import CONSUMER, InboxPending, hand_on
from bus.connection import Client, as_text, translated
from bus.consumer import DELETED_REASON, Ack, Consumer, Delivery
from bus.errors import BusError, CommandFailed, ConnectionFailed
from bus.stream_replies import stream_entries
from bus.waits import backoff

__all__ = [
    "CONSUMER",
    "DEFAULT_CLAIM_IDLE_MS",
    "STALL_GRACE_S",
    "InboxListener",
    "Received",
    "other_group",
]

DEFAULT_CLAIM_IDLE_MS: Final = 2000
_POLL_MS: Final = 1000
STALL_GRACE_S: Final = 1.0
T = TypeVar("T")


@dataclass(frozen=True)
class Received:
    """A directive taken from the inbox and not acknowledged yet."""

    directive: Directive
    delivery: Delivery


def other_group(received: Received, group_id: str) -> str | None:
    """Why a directive is not the listener's of ``group_id`` to deliver: it is another group's. The inbox
    is the agent id's on the group's shard, so a mistyped --group that lands on the same shard (or one
    agent id in two groups of a shard) reads it too; the directive is left pending, for its own group's
    listener."""
    envelope = received.directive.envelope
    if envelope.group_id == group_id:
        return None
    return (
        f"the directive {received.delivery.entry_id} in {envelope.agent_id}'s inbox is for group "
        f"{envelope.group_id!r}, not {group_id!r}: left for a listener of that group (check --group)"
    )


class InboxListener:
    """Takes directives from one agent's inbox as the consumer ``listen`` of the delivery group."""

    def __init__(
        self,
        client: Client,
        inbox: str,
        *,
        claim_idle_ms: int = DEFAULT_CLAIM_IDLE_MS,
        abandoned_ms: int = ABANDONED_MS,
        log: Callable[[str], None] = stderr_log,
        group_id: str | None = None,
    ) -> None:
        if claim_idle_ms < 1 or abandoned_ms < 1:
            raise ValueError("claim_idle_ms and abandoned_ms must be at least 1")
        self.client = client
        self.inbox = inbox
        self.claim_idle_ms = claim_idle_ms
        self.abandoned_ms = abandoned_ms
        self.log = log
        self.consumer = Consumer(client, inbox, GROUP, CONSUMER)
        self.group_id = group_id
        """The group whose directives are handed out; another group's are left pending (None: any)."""
        self.left: dict[str, str] = {}
        """Entries left for another group's listener, and why (said once each): not claimed again, so
        that one such entry, which anyone with the adapter's user may add, does not end every wait."""
        self.unanswered = False
        """The last :meth:`next` returned None because the server did not answer, not for want of a
        directive."""
        self.unreachable: ConnectionFailed | None = None
        """Why the last :meth:`next` returned None when the server could not be reached until its end."""

    async def next(self, timeout_s: float | None) -> Received | None:
        """The next directive, waiting up to ``timeout_s`` seconds (None: for ever); None on timeout
        (:attr:`unanswered` says whether the server was silent, :attr:`unreachable` whether it was away).

        Entries that are not directives for an agent are acknowledged and skipped, entries that are not
        valid envelopes are dead-lettered. A lost connection is retried until the deadline; a server that
        does not answer is given up on shortly after it. A directive being read at that instant stays
        pending under ``listen``, for the next listener to claim.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self.unanswered = False
        self.unreachable = None
        try:
            # Each read blocks no longer than the deadline, but a server that stalls (or a network that
            # swallows the reply) would hold a command until the socket timeout, 30 s by default.
            async with asyncio.timeout(None if timeout_s is None else timeout_s + STALL_GRACE_S):
                return await self._wait(deadline)
        except TimeoutError:
            self.log(f"inbox {self.inbox}: the server did not answer within {timeout_s:g}s")
            self.unanswered = True
            return None
        except ConnectionFailed as exc:
            left = _remaining(deadline)
            if left is None or left > 0:
                raise
            # out of time while the connection was retried: a timeout as for a silent server (a runner
            # that polls again on a timeout would give up, for an error, during a restart of the server)
            self.log(f"inbox {self.inbox}: the server could not be reached within {timeout_s:g}s ({exc})")
            self.unreachable = exc
            return None

    async def _wait(self, deadline: float | None) -> Received | None:
        await self._retrying(self.consumer.ensure_group, deadline)
        while True:
            found = await self._retrying(lambda: self._step(_remaining(deadline)), deadline)
            if found is not None:
                if await self._retrying(functools.partial(self._still_ours, found), deadline):
                    return found
                self.log(
                    f"inbox {self.inbox}: entry {found.delivery.entry_id} was taken by another reader (a "
                    f"listener or a delivering adapter) while this one was held up: left to it"
                )
            left = _remaining(deadline)
            if left is not None and left <= 0:
                return None

    async def _still_ours(self, received: Received) -> bool:
        """Whether no other reader has taken the directive since this listener did. One held up past
        ``claim_idle_ms`` between reading it and handing it out (a process paused, an event loop busy)
        loses it to the next listener, or to a delivering adapter, which delivers it: handing it out as
        well would deliver it twice. Every listener is the consumer ``listen``, so a listener's claim
        shows only in the entry's delivery count. When the entry is still this listener's, it is
        refreshed by an ``XCLAIM`` whose own idle check fails if another reader took it meanwhile (its
        claim made the entry younger than the idle time read): after a yes, no other listener can take
        it for ``claim_idle_ms``. The entry or the inbox deleted meanwhile: the directive is no one else's."""
        entry = received.delivery.entry_id
        try:
            with translated():
                pending: list[Any] = await self.client.xpending_range(
                    self.inbox, GROUP, min=entry, max=entry, count=1
                )
                if not pending:
                    return False  # acknowledged by the reader that took it, or deleted
                mine = as_text(pending[0]["consumer"]) == CONSUMER
                if not mine or int(pending[0]["times_delivered"]) != received.delivery.deliveries:
                    return False
                idle = int(pending[0]["time_since_delivered"])
                if await self.client.xclaim(self.inbox, GROUP, CONSUMER, idle, [entry], justid=True):
                    return True
                # not claimed: another reader took it meanwhile, or it was deleted from the stream (which
                # the claim drops from the pending list): the directive in hand is then no one else's
                return not await self.client.xrange(self.inbox, min=entry, max=entry, count=1)
        except CommandFailed as exc:
            if "NOGROUP" not in str(exc):
                raise
            return True

    async def ack(self, received: Received) -> None:
        """Acknowledge a directive once it has been handed to the agent."""
        await self.consumer.settle([(received.delivery, Ack.ACK, None)])

    async def hold(self, received: Received) -> None:
        """Keep a directive's entry fresh while it is being handed out (to a reader slow to read a long one)
        until cancelled, so that no other listener or adapter takes it for one a dead listener left and
        delivers it again. For :attr:`abandoned_ms` at most: one never handed out is left to a later
        listener then. At most a second apart: an adapter takes an entry idle for its --retry-ms (5 s)."""
        every = min(max(self.claim_idle_ms / 4000, 0.01), 1.0)
        for _ in range(int(self.abandoned_ms / 1000 / every)):
            await asyncio.sleep(every)
            with contextlib.suppress(BusError):  # the next try may do; a stale entry is delivered again
                await self.consumer.hold(received.delivery)

    async def _retrying(self, call: Callable[[], Awaitable[T]], deadline: float | None) -> T:
        """``call()``, again after a lost connection (with backoff) until ``deadline``."""
        delays = backoff()
        while True:
            try:
                return await call()
            except ConnectionFailed as exc:
                left = _remaining(deadline)
                if left is not None and left <= 0:
                    raise
                delay = next(delays)
                self.log(f"inbox {self.inbox}: {exc}; retrying in {delay:.1f}s")
                await asyncio.sleep(delay if left is None else min(delay, left))

    async def _step(self, remaining: float | None) -> Received | None:
        """One round: stale entries of dead listeners, then new entries (blocking at most a poll).

        While an older directive is pending under ``listen`` but not stale yet (a listener is printing
        it, or died a moment ago), no new one is read: the agent gets its directives in order.
        """
        try:
            pending = await self._pending()
            found = await self._claim_stale(pending)
            if found is None:
                if pending.stale or pending.abandoned:
                    # the claims changed the pending list (an entry lost to another listener is held
                    # under `listen` now, one settled here is gone): look again before deciding to wait
                    pending = await self._pending()
                held_ms = self._held_ms(pending)
                if held_ms is not None:
                    wait_s = held_ms / 1000 if remaining is None else min(held_ms / 1000, max(remaining, 0))
                    await asyncio.sleep(wait_s)  # until the entry is acknowledged or can be claimed
                    return None
                found = await self._read_new(_block_ms(remaining, self.claim_idle_ms))
        except CommandFailed as exc:
            if "NOGROUP" not in str(exc):
                raise
            await self.consumer.ensure_group()  # the inbox was deleted (or trimmed away) meanwhile
            return None
        return found

    async def _pending(self) -> InboxPending:
        # one XPENDING over the whole group, not one per question (agents.inbox_pending)
        return await InboxPending.read(
            self.client,
            self.inbox,
            claim_idle_ms=self.claim_idle_ms,
            abandoned_ms=self.abandoned_ms,
            skip=self.left,
        )

    def _held_ms(self, pending: InboxPending) -> int | None:
        """How long until the oldest entry pending under ``listen`` can be claimed; None if there is none."""
        if pending.held_idle_ms is None:
            return None
        return max(1, min(_POLL_MS, self.claim_idle_ms - pending.held_idle_ms))

    async def _claim_stale(self, pending: InboxPending) -> Received | None:
        """An entry a dead listener left, or a dead adapter (one alive keeps what it delivers fresh)."""
        for entries, idle_ms in ((pending.stale, self.claim_idle_ms), (pending.abandoned, self.abandoned_ms)):
            for entry_id, deliveries in entries:
                found = await self._claim(entry_id, idle_ms, deliveries)
                if found is not None:
                    return found
        return None

    async def _claim(self, entry_id: str, idle_ms: int, deliveries: int) -> Received | None:
        # XCLAIM checks the idle time again: an entry refreshed or taken by another reader meanwhile is
        # left where it is
        with translated():
            claimed: list[Any] = await self.client.xclaim(self.inbox, GROUP, CONSUMER, idle_ms, [entry_id])
        if not claimed:
            return None  # another listener claimed it first, or it is gone
        fields = claimed[0][1] if claimed[0] and claimed[0][0] is not None else None
        if not fields:  # Redis 6.2 answers nil for an entry deleted from the stream meanwhile
            await self._settle(Delivery(entry_id, None, None, DELETED_REASON, 0), Ack.ACK)
            return None
        return await self._take(entry_id, fields, deliveries + 1)

    async def _read_new(self, block_ms: int | None) -> Received | None:
        with translated():
            reply = await self.client.xreadgroup(GROUP, CONSUMER, {self.inbox: ">"}, count=1, block=block_ms)
        for entry_id, fields in stream_entries(reply):
            found = await self._take(as_text(entry_id), fields, 1)
            if found is not None:
                return found
        return None

    async def _take(self, entry_id: str, fields: Mapping[Any, Any], deliveries: int) -> Received | None:
        """The directive in an entry just read; anything else is dead-lettered here and None returned.

        A directive is not dead-lettered for the times it was delivered before: a listener ends whenever
        its agent stops waiting (interrupted, killed, out of time), which says nothing against the
        directive, and dead-lettering it would leave the agent without its answer."""
        delivery = self.consumer.delivery(entry_id, fields, deliveries)
        if delivery.envelope is None:
            self.log(
                f"inbox {self.inbox}: entry {entry_id} is not a valid envelope ({delivery.error}); "
                "dead-lettered"
            )
            await self._settle(delivery, Ack.DEAD)
            return None
        directive = as_directive(delivery.envelope)
        if directive is None:
            why = not_a_directive(delivery.envelope)
            self.log(f"inbox {self.inbox}: {why}; dead-lettered")
            await self.consumer.settle([(delivery, Ack.DEAD, why)])
            return None
        received = Received(directive, delivery)
        wrong = None if self.group_id is None else other_group(received, self.group_id)
        if wrong is not None:
            self.left[entry_id] = wrong
            self.log(wrong)
            await hand_on(self.client, self.inbox, entry_id, deliveries)
            return None
        return received

    async def _settle(self, delivery: Delivery, ack: Ack) -> None:
        await self.consumer.settle([(delivery, ack, delivery.error)])


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


def _block_ms(remaining: float | None, claim_idle_ms: int) -> int | None:
    """How long one read blocks: None (do not block) once the deadline has passed, else at most one
    poll period, so stale entries of dead listeners are looked for regularly."""
    poll = max(1, min(_POLL_MS, claim_idle_ms // 2))
    if remaining is None:
        return poll
    if remaining <= 0:
        return None
    return max(1, min(poll, int(remaining * 1000)))
