"""Waiting in a long-running loop: for an event (a stop request, a change) or a time, whichever is first."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Final

__all__ = ["backoff", "wait_for"]

_FIRST_S: Final = 0.2
_MAX_S: Final = 5.0


def backoff() -> Iterator[float]:
    """The waits between tries against a server that is away: 0.2 s, doubled each time, at most 5 s."""
    delay = _FIRST_S
    while True:
        yield delay
        delay = min(delay * 2, _MAX_S)


async def wait_for(event: asyncio.Event, seconds: float) -> bool:
    """Wait until ``event`` is set or ``seconds`` pass; whether it is set."""
    if not event.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), seconds)
    return event.is_set()
