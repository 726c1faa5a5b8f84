"""Process settings for a long-running coordinator, and for a command that builds a large view: the
garbage collector.

A coordinator keeps every group's state in memory (records, merged findings, windows of applied ids):
hundreds of thousands of long-lived objects, and it replaces a few of them for every signal. CPython's
collector, run by allocation counts, then spends a third of the process's time walking objects that are
not garbage, and each collection of the older generations stalls every shard for milliseconds (a full one
over a settled state: 15 to 25 ms), which is what the p99 latency measures.

Almost nothing the coordinator builds forms reference cycles: its models are trees, freed by reference
counting the moment a rule replaces them (a full collection after 100 000 applied signals finds none).
So the collector is not run by allocations at all; :func:`collect_garbage` runs a full collection on a
clock instead, which bounds what the odd cycle (an exception's traceback, an event loop object) can hold
at the cost of one short stall a minute.
"""

from __future__ import annotations

import asyncio
import gc
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from bus.stop_signals import handled_stop_signals
from bus.waits import wait_for

__all__ = ["GC_INTERVAL_S", "collect_garbage", "no_collection", "tune_gc"]

GC_INTERVAL_S: Final = 60.0
"""Seconds between two full collections."""


def tune_gc() -> None:
    """Collect once, move everything allocated so far (modules, schemas, settings) out of the collector's
    sight for good (it lives as long as the process), and stop collecting by allocation counts. Call
    once, after start-up; then run :func:`collect_garbage` beside the work."""
    with _stop_signals_held():
        gc.collect()
    gc.freeze()
    gc.disable()


@contextmanager
def _stop_signals_held() -> Iterator[None]:
    """Hold the stop signals that arrive in the block, and deliver them after it. A collection runs the
    ``__del__`` of what it frees (a connection pool left in a cycle, say), and Python raises Ctrl-C's
    KeyboardInterrupt in whatever code runs: there it is printed as ignored, and lost (the process went on
    as if never interrupted). Before the stop signals have handlers of the process's own, that is."""
    held: list[int] = []
    previous = {
        sig: signal.signal(sig, lambda number, _frame: held.append(number)) for sig in handled_stop_signals()
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        for number in held:
            signal.raise_signal(number)


async def collect_garbage(stop: asyncio.Event, interval_s: float = GC_INTERVAL_S) -> None:
    """A full collection every ``interval_s`` seconds until ``stop`` is set."""
    while not await wait_for(stop, interval_s):
        gc.collect()


@contextmanager
def no_collection() -> Iterator[None]:
    """The collector not run by allocation counts for the block: a command that reads a group's hundreds of
    thousands of findings into models (trees, freed by reference counting) would otherwise spend two
    thirds of its time in collections that walk them and find nothing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
