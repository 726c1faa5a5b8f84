"""The console script's stdout: a write to it that fails is the command's one-line error, for every command.

:func:`run_printing` gives the process a stdout that remembers the error of a write that failed, runs the
command, and flushes what is left at its end: an error that stdout raised (a full disk, ``/dev/full``, a
stdout closed at start) becomes ``Error: cannot write the output: ...`` on stderr and exit status 1, not a
traceback (or, for output still buffered at exit, the interpreter's "Exception ignored" and status 120). A
reader that went away (``EPIPE``, ``| head``) ends the command quietly with 1, as click does.

A process started with stdout closed (``>&-``) gets one whose every write fails (``EBADF``), so that what
a command prints fails there rather than vanishing (click prints nothing when ``sys.stdout`` is None);
:func:`stdout_closed` tells a command that would rather refuse to start.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

__all__ = ["EXIT_OUTPUT_ERROR", "run_printing", "stdout_closed"]

EXIT_OUTPUT_ERROR = 1
"""Exit status of a command whose output could not be written (click's for a closed pipe too)."""

_CLOSED = "stdout is closed"


class _Failures:
    """The last error a write to stdout raised, and whether writes are now thrown away."""

    def __init__(self) -> None:
        self.last: OSError | None = None
        self.discard = False


class _Stdout(io.FileIO):
    """File descriptor 1, remembering the error of a write that failed."""

    def __init__(self, fd: int, failures: _Failures) -> None:
        super().__init__(fd, "wb", closefd=False)
        self.failures = failures

    def write(self, b: ReadableBuffer, /) -> int:
        if self.failures.discard:
            return memoryview(b).nbytes
        try:
            return super().write(b)
        except OSError as exc:
            self.failures.last = exc
            raise


class _ClosedStdout(io.RawIOBase):
    """The stdout of a process started without one: every write fails, as one to a closed descriptor.

    Not file descriptor 1 itself: a file the command opens may have been given that number.
    """

    def __init__(self, failures: _Failures) -> None:
        super().__init__()
        self.failures = failures

    def writable(self) -> bool:
        return True

    def write(self, b: ReadableBuffer, /) -> int:
        if self.failures.discard:
            return memoryview(b).nbytes
        exc = OSError(errno.EBADF, _CLOSED)
        self.failures.last = exc
        raise exc


def stdout_closed() -> bool:
    """Whether the process was started with its stdout closed (``>&-``): nothing it prints reaches anyone."""
    stream = sys.stdout
    return stream is None or isinstance(getattr(stream, "buffer", None), _ClosedStdout)


def _install(failures: _Failures) -> bool:
    """Replace the interpreter's stdout with one of ours, alike in all else; False when it is not the
    interpreter's (a caller's own stream, left as it is: its errors are not taken for ours)."""
    old = sys.stdout
    if old is None:
        sys.stdout = io.TextIOWrapper(
            _ClosedStdout(failures), encoding="utf-8", errors="strict", newline="\n", write_through=True
        )
        return True
    if old is not sys.__stdout__ or not isinstance(old, io.TextIOWrapper):
        return False
    old.flush()
    raw = _Stdout(old.fileno(), failures)
    raw.name = old.name  # "<stdout>", as the interpreter names it
    binary: io.RawIOBase | io.BufferedWriter = raw
    if isinstance(old.buffer, io.BufferedWriter):  # not when started unbuffered (-u, PYTHONUNBUFFERED)
        size = os.fstat(raw.fileno()).st_blksize
        binary = io.BufferedWriter(raw, size if size > 1 else io.DEFAULT_BUFFER_SIZE)  # as open() sizes it
    sys.stdout = io.TextIOWrapper(
        binary,
        encoding=old.encoding,
        errors=old.errors,
        newline="\n",
        line_buffering=old.line_buffering,
        write_through=old.write_through,
    )
    return True


def _fail(exc: OSError, failures: _Failures) -> NoReturn:
    # What is still buffered is thrown away: the interpreter's own flush at exit would only fail again.
    failures.discard = True
    if exc.errno != errno.EPIPE:  # the reader that went away (`| head`) wants no word: click's way
        with contextlib.suppress(OSError, ValueError, AttributeError):  # stderr closed or full too
            sys.stderr.write(f"Error: cannot write the output: {exc.strerror or exc}\n")
            sys.stderr.flush()
    raise SystemExit(EXIT_OUTPUT_ERROR)


def run_printing(command: Callable[[], object]) -> NoReturn:
    """Run ``command`` (the click root), its output's errors its one-line error; exit with its status."""
    failures = _Failures()
    ours = _install(failures)
    code: int | str | None = 0
    try:
        command()
    except SystemExit as exc:
        code = exc.code
    except OSError as exc:
        # Only the very error a write to stdout raised is one of the output: an OSError of anything else
        # (a file, a socket, a process) with the same errno (ENOSPC of a full data directory, EBADF of a
        # closed socket) stays what it is, a bug's traceback. Its identity tells them apart where its errno
        # cannot, and where trying a flush cannot either (the failed write's bytes are no longer buffered).
        if not ours or exc is not failures.last:
            raise
        _fail(exc, failures)
    # Output still buffered fails only now, not in the command: whatever this flush raises is the output's.
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except OSError as exc:
        _fail(exc, failures)
    raise SystemExit(code)
