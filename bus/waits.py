"""Waiting in a long-running loop: for an event (a stop request, a change) or a time, whichever is first."""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["wait_for"]


async def wait_for(event: asyncio.Event, seconds: float) -> bool:
    """Wait until ``event`` is set or ``seconds`` pass; whether it is set."""
    if not event.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), seconds)
    return event.is_set()
