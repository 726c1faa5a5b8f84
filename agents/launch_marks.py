"""The mark of a start: a launcher's record, in its log directory, that it started a request's agent, kept
until the request is acknowledged.

A launcher killed after it started an agent and before it acknowledged the request leaves the request to be
read again, by its restart or by another launcher on the same log directory: the mark tells that one whether
the agent was started, so that it is started once. The mark is written around the start so that a kill at
any point leaves one that tells the truth:

1. Before the start it is made saying ``starting`` and locked (``flock``), in one step: a file of its own,
   locked and written, then renamed over the mark's name. The adapter inherits the lock.
2. After the start the launcher writes ``started`` over it, and so does the adapter as it starts, before
   its agent; the adapter then lets the lock go.

A reader takes the lock before it reads. ``starting`` and locked: a start is under way (a launcher in it, or
an adapter starting up): to be looked at again. ``starting`` and not locked: neither the launcher nor an
adapter holds it, so no adapter got as far as its agent, and the request is started. Anything else,
an empty file included (what earlier versions made), means started. (Earlier versions take any mark for
started, a ``starting`` one too: the launchers on one log directory are best of one version.)
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import os
import stat
from pathlib import Path
from typing import Final

__all__ = ["Mark", "abandon", "adapter_started", "begin", "read", "started", "write_started"]

_STARTING: Final = b"starting\n"
_STARTED: Final = b"started\n"


class Mark(enum.Enum):
    """What a request's mark says."""

    NONE = "none"
    """No start: no mark, or one whose start never came."""
    STARTING = "starting"
    """A start under way."""
    STARTED = "started"


def begin(mark: Path) -> int | None:
    """Make the mark, saying ``starting``, locked: the descriptor that holds the lock, to pass on to the
    adapter (None when it cannot be made: the start goes on, and :func:`write_started` tries once more)."""
    partial = mark.with_name(f"{mark.name}.{os.getpid()}.partial")  # its own: two launchers never share it
    try:
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, _STARTING)
        os.replace(partial, mark)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            partial.unlink()
        return None
    return fd


def started(fd: int) -> None:
    """Say started, through a descriptor of the mark: the launcher's from :func:`begin`, or the one its
    adapter inherited. A kill halfway leaves something that is not ``starting``: started too."""
    os.pwrite(fd, _STARTED, 0)
    os.ftruncate(fd, len(_STARTED))


def adapter_started(fd: int) -> None:
    """An adapter says started through the mark it inherited (``adapter run --started-fd``), and lets it go.

    Raises ``ValueError`` when ``fd`` is not a mark (written over, another file would be damaged), and
    ``OSError`` when the mark cannot be written."""
    try:
        info = os.fstat(fd)
    except OSError as exc:
        raise ValueError(f"descriptor {fd} is not open ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode) or info.st_size not in (len(_STARTING), len(_STARTED)):
        raise ValueError(f"descriptor {fd} is not a launch mark")
    try:
        started(fd)
    finally:
        os.close(fd)


def write_started(mark: Path) -> None:
    """Say started without the lock, when :func:`begin` could not make the mark."""
    mark.write_bytes(_STARTED)


def abandon(mark: Path, fd: int) -> None:
    """The start failed: the mark goes (the request is tried again, or dead-lettered)."""
    with contextlib.suppress(OSError):
        mark.unlink()
    os.close(fd)


def read(mark: Path) -> Mark:
    """What the mark says. Locked before it is read: a start under way holds it until it says started."""
    try:
        fd = os.open(mark, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return Mark.NONE
    except OSError:  # there but unreadable: its being there was all an earlier version said
        return Mark.STARTED
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            held = False
        except BlockingIOError:
            held = True
        if os.read(fd, len(_STARTING) + 1) != _STARTING:
            return Mark.STARTED
        return Mark.STARTING if held else Mark.NONE
    finally:
        os.close(fd)
