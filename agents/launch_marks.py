"""The mark a launcher leaves of a request whose agent it started, until the request is acknowledged.

A launcher killed after it started an agent and before it acknowledged the request leaves the request to be
read again, by its restart or by another launcher on the same log directory: the mark tells it the agent was
started, so it is not started twice. The mark is made, and locked (``flock``), before the agent's adapter
is started; the adapter inherits the lock and holds it while it runs, and the launcher writes the mark once
the start returned. So a launcher killed at any point leaves a mark that is either written, or locked by an
adapter that runs (started), or neither (killed before the start: started again). Only an adapter that
ended before the restart looked, with its launcher killed before it wrote the mark, is started twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

__all__ = ["hold", "says_started", "written"]


def hold(mark: Path) -> int | None:
    """The mark made and locked, before the start: the descriptor to pass on to the adapter (None when it
    cannot be made: the start goes on, as a start whose mark cannot be written does)."""
    try:
        fd = os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return None
    with contextlib.suppress(OSError):  # held by a live adapter of an earlier start: it says so already
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def written(mark: Path) -> None:
    """The start returned: the mark says so in its content, whoever holds its lock later."""
    mark.write_bytes(b"1")


def says_started(mark: Path) -> bool:
    """Whether the mark says its request's agent was started: written, or locked by its adapter."""
    try:
        fd = os.open(mark, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if os.fstat(fd).st_size:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
