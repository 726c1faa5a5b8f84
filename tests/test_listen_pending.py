"""What a listener takes over and what it waits for, learned from one look at the inbox group's pending
list per poll: a dead listener's entries first, then a dead adapter's; an entry held under ``listen``
keeps newer directives back, one an adapter delivers does not. Idle times are set with ``XCLAIM ... IDLE``
rather than waited for, and ``next(0)`` makes exactly one poll."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from adapter_kit import Bus, open_bus
from test_listen import GROUP_ID, directive

from agents.delivery import GROUP
from agents.inbox_listener import CONSUMER, InboxListener, Received
from bus.connection import as_text
from bus.keys import dead_stream_for
from bus.publisher import Publisher
from bus.stream_replies import stream_entries

AGENT = "p1"
A_DEAD_LISTENERS = 10_000
"""Idle long enough for a listener to take over (the default claim idle time is 2 s)."""
A_DEAD_ADAPTERS = 120_000
"""Idle long enough for a listener to take over from an adapter (ABANDONED_MS is a minute)."""
MORE_THAN_A_PAGE = 150


async def _inbox(bus: Bus) -> str:
    inbox = bus.inbox(GROUP_ID, AGENT)
    await bus.client.xgroup_create(inbox, GROUP, id="0", mkstream=True)
    return inbox


async def _send(bus: Bus, answer: str) -> str:
    return await Publisher(bus.client, bus.keys).send_directive(directive(AGENT, answer))


async def _read(bus: Bus, inbox: str, consumer: str, count: int = 1) -> list[str]:
    reply = await bus.client.xreadgroup(GROUP, consumer, {inbox: ">"}, count=count)
    return [as_text(entry_id) for entry_id, _ in stream_entries(reply)]


async def _idle(bus: Bus, inbox: str, consumer: str, entry_id: str, idle_ms: int) -> None:
    """Make ``consumer``'s entry look as if it had been left for ``idle_ms``."""
    await bus.client.xclaim(inbox, GROUP, consumer, 0, [entry_id], idle=idle_ms, justid=True)


async def _adapter_holds_a_crowd(bus: Bus, inbox: str) -> None:
    """More entries than one page of the pending list, fresh under ``adapter``, older than the rest."""
    for _ in range(MORE_THAN_A_PAGE):
        await bus.client.xadd(inbox, {"data": b"filler"})
    assert len(await _read(bus, inbox, GROUP, MORE_THAN_A_PAGE)) == MORE_THAN_A_PAGE


def _answer(received: Received | None) -> str:
    assert received is not None
    payload: Any = received.directive.envelope.payload
    return str(payload.answers[0].answer)


async def test_a_poll_looks_at_the_pending_list_once(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async with open_bus(redis_url) as bus:
        inbox = await _inbox(bus)
        held = await _send(bus, "held")
        assert await _read(bus, inbox, CONSUMER) == [held]  # a listener is printing it
        looks = 0
        xpending_range = bus.client.xpending_range

        async def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal looks
            looks += 1
            return await xpending_range(*args, **kwargs)

        monkeypatch.setattr(bus.client, "xpending_range", counted)
        assert await InboxListener(bus.client, inbox).next(0) is None
        assert looks == 1


async def test_a_dead_listeners_directive_behind_a_page_of_adapter_entries_is_taken(redis_url: str) -> None:
    async with open_bus(redis_url) as bus:
        inbox = await _inbox(bus)
        await _adapter_holds_a_crowd(bus, inbox)
        left = await _send(bus, "left")
        assert await _read(bus, inbox, CONSUMER) == [left]
        await _idle(bus, inbox, CONSUMER, left, A_DEAD_LISTENERS)
        received = await InboxListener(bus.client, inbox).next(0)
        assert received is not None and received.delivery.entry_id == left
        assert received.delivery.deliveries == 2


async def test_an_entry_held_behind_a_page_of_adapter_entries_keeps_newer_ones_back(redis_url: str) -> None:
    async with open_bus(redis_url) as bus:
        inbox = await _inbox(bus)
        await _adapter_holds_a_crowd(bus, inbox)
        held = await _send(bus, "held")
        assert await _read(bus, inbox, CONSUMER) == [held]  # a live listener is printing it
        newer = await _send(bus, "newer")
        assert await InboxListener(bus.client, inbox).next(0) is None
        assert await _read(bus, inbox, "probe") == [newer]  # never read by the listener


async def test_a_dead_listeners_directive_comes_before_a_dead_adapters_older_one(redis_url: str) -> None:
    async with open_bus(redis_url) as bus:
        inbox = await _inbox(bus)
        older = await _send(bus, "older")
        assert await _read(bus, inbox, GROUP) == [older]
        await _idle(bus, inbox, GROUP, older, A_DEAD_ADAPTERS)
        newer = await _send(bus, "newer")
        assert await _read(bus, inbox, CONSUMER) == [newer]
        await _idle(bus, inbox, CONSUMER, newer, A_DEAD_LISTENERS)
        listener = InboxListener(bus.client, inbox)
        first = await listener.next(0)
        assert first is not None and _answer(first) == "newer"
        await listener.ack(first)
        assert _answer(await listener.next(0)) == "older"


async def test_a_directive_an_adapter_delivers_does_not_keep_newer_ones_back(redis_url: str) -> None:
    async with open_bus(redis_url) as bus:
        inbox = await _inbox(bus)
        delivering = await _send(bus, "delivering")
        assert await _read(bus, inbox, GROUP) == [delivering]
        await _send(bus, "newer")
        assert _answer(await InboxListener(bus.client, inbox).next(0)) == "newer"


async def test_a_take_over_lost_to_another_listener_keeps_newer_ones_back(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_bus(redis_url) as bus:
        inbox = await _inbox(bus)
        abandoned = await _send(bus, "abandoned")
        assert await _read(bus, inbox, GROUP) == [abandoned]
        await _idle(bus, inbox, GROUP, abandoned, A_DEAD_ADAPTERS)
        newer = await _send(bus, "newer")
        xclaim = bus.client.xclaim

        async def raced(*args: Any, **kwargs: Any) -> Any:
            # another listener takes the entry over between this one's look and its claim
            await xclaim(inbox, GROUP, CONSUMER, 0, [abandoned], justid=True)
            monkeypatch.setattr(bus.client, "xclaim", xclaim)
            return await xclaim(*args, **kwargs)

        monkeypatch.setattr(bus.client, "xclaim", raced)
        assert await InboxListener(bus.client, inbox).next(0) is None
        assert await _read(bus, inbox, "probe") == [newer]  # held back while the other one prints


async def test_a_stale_entry_dead_lettered_on_take_over_keeps_nothing_back(redis_url: str) -> None:
    async with open_bus(redis_url) as bus:
        inbox = await _inbox(bus)
        bad = as_text(await bus.client.xadd(inbox, {"data": b"{not json"}))
        assert await _read(bus, inbox, CONSUMER) == [bad]
        await _idle(bus, inbox, CONSUMER, bad, A_DEAD_LISTENERS)
        await _send(bus, "next")
        assert _answer(await InboxListener(bus.client, inbox, log=lambda _: None).next(0)) == "next"
        dead: Any = await bus.client.xrange(dead_stream_for(inbox), "-", "+")
        assert [fields[b"entry_id"].decode() for _, fields in dead] == [bad]


def _meanwhile(
    monkeypatch: pytest.MonkeyPatch, listener: InboxListener, then: Callable[[Received], Awaitable[None]]
) -> None:
    """``listener`` held up each time it has taken a directive, before it hands it out: ``then`` runs."""
    step = listener._step

    async def held(remaining: float | None) -> Received | None:
        found = await step(remaining)
        if found is not None:
            await then(found)
        return found

    monkeypatch.setattr(listener, "_step", held)


@pytest.mark.parametrize("acknowledged", [True, False], ids=["delivered", "delivering"])
async def test_a_directive_taken_from_a_listener_held_up_past_the_claim_idle_time_is_not_handed_out_by_it(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, acknowledged: bool
) -> None:
    """Held up between reading a directive and handing it out (a paused process, an MCP server's event
    loop busy with a huge line), a listener loses it to the next, which delivers it: the first one handed
    it out too, and the agent was resumed twice."""
    async with open_bus(redis_url) as bus:
        inbox = await _inbox(bus)
        await _send(bus, "once")
        said: list[str] = []
        held_up, other = InboxListener(bus.client, inbox, log=said.append), InboxListener(bus.client, inbox)

        async def taken_over(found: Received) -> None:  # held up for longer than the claim idle time
            await _idle(bus, inbox, CONSUMER, found.delivery.entry_id, A_DEAD_LISTENERS)
            taken = await other.next(0)
            assert _answer(taken) == "once"
            if acknowledged and taken is not None:
                await other.ack(taken)

        _meanwhile(monkeypatch, held_up, taken_over)
        assert await held_up.next(0) is None
        assert any("was taken by another reader (a listener or a delivering adapter)" in s for s in said), (
            said
        )
        monkeypatch.undo()
        assert await held_up.next(0) is None  # the other has it: nothing for this one now either


async def test_a_directive_a_delivering_adapter_took_from_a_held_up_listener_stays_the_adapter_s(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check refreshed the entry to ``listen`` whatever it found: taken back from the adapter that
    delivered it, it was claimed by a listener two seconds later and delivered a second time."""
    async with open_bus(redis_url) as bus:
        inbox = await _inbox(bus)
        await _send(bus, "once")
        held_up = InboxListener(bus.client, inbox, log=lambda _: None)

        async def delivering(found: Received) -> None:  # an adapter's delivery takes the entry over
            await bus.client.xclaim(inbox, GROUP, "an-adapter", 0, [found.delivery.entry_id])

        _meanwhile(monkeypatch, held_up, delivering)
        assert await held_up.next(0) is None
        [entry] = await bus.client.xpending_range(inbox, GROUP, min="-", max="+", count=10)
        assert entry["consumer"] in (b"an-adapter", "an-adapter")


async def test_a_directive_whose_inbox_was_deleted_while_it_was_handed_out_is_handed_out(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_bus(redis_url) as bus:
        inbox = await _inbox(bus)
        await _send(bus, "kept")
        listener = InboxListener(bus.client, inbox, log=lambda _: None)

        async def deleted(_found: Received) -> None:
            await bus.client.delete(inbox)

        _meanwhile(monkeypatch, listener, deleted)
        assert _answer(await listener.next(0)) == "kept"
