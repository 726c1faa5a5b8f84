"""Process settings for a long-running coordinator: the garbage collector.

A coordinator keeps every group's state in memory (records, merged findings, windows of applied ids):
hundreds of thousands of long-lived objects, and it replaces a few of them for every signal. CPython's
default collector thresholds (a young collection every 700 allocations, a full one whenever the old
generation grew by a quarter) then spend a third of the process's time walking objects that are not
garbage, and a full collection over the whole state stalls every shard for tens of milliseconds, which is
what the p99 latency measures. Almost nothing the coordinator builds forms reference cycles (its models
are trees; reference counting frees them), so collecting rarely loses nothing.
"""

from __future__ import annotations

import gc
from typing import Final

__all__ = ["GC_THRESHOLDS", "tune_gc"]

GC_THRESHOLDS: Final = (20_000, 20, 50)
"""Young collections every 20 000 allocations instead of 700, older ones accordingly rarer."""


def tune_gc() -> None:
    """Set :data:`GC_THRESHOLDS` and move everything allocated so far (modules, schemas, settings) out of
    the collector's sight for good: it lives as long as the process. Call once, after start-up."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
