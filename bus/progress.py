"""A progress line for long work in the CLI: on stderr, and only when stderr is a terminal.

Commands that read a whole stream or import a whole file report how far they are, so a long run is not
mistaken for a hang. Short runs print nothing (the line appears after ``delay`` seconds), the line is
rewritten in place at most every ``interval`` seconds, and it is erased when the work ends, so the
command's output is the same on a terminal as in a pipe or a log, where nothing is written at all.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

__all__ = ["Progress"]

_ERASE = "\r\x1b[K"  # back to the line's start, then clear to its end


class Progress:
    """``with Progress() as progress: ... progress.update(f"read {n:,} entries")``."""

    def __init__(
        self,
        *,
        stream: TextIO | None = None,
        delay: float = 1.0,
        interval: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._enabled = self._stream.isatty()
        self._clock = clock
        self._interval = interval
        self._due = clock() + delay
        self._shown = False

    def update(self, text: str) -> None:
        """Show ``text`` as the current state, unless the line was rewritten too recently."""
        if not self._enabled:
            return
        now = self._clock()
        if now < self._due:
            return
        self._due = now + self._interval
        self._stream.write(_ERASE + text)
        self._stream.flush()
        self._shown = True

    def close(self) -> None:
        """Erase the line, if one was shown."""
        if self._shown:
            self._stream.write(_ERASE)
            self._stream.flush()
            self._shown = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
