"""The stdin of ``subagent-bus mcp``: its lines, read by a daemon thread, screened before the MCP SDK
sees them, so that every line a client sends (but a response) gets an answer and none can exhaust the
server's memory.

Why stdin is not left to the SDK:

- It reads in a worker thread that the interpreter joins at exit, so a server waiting for the client's
  next line ignored Ctrl-C until that line came. :class:`StdinLines` reads the descriptor in a daemon
  thread instead, which is left blocked at exit.
- It holds a line until its newline, however long. :class:`StdinLines` holds at most
  :data:`MAX_LINE_BYTES`; the rest of a longer line is read and dropped as it arrives (one read's worth
  of memory) up to its newline, and the line is answered ``-32600`` with a null id at once.
- It refuses a line with a lone surrogate escape (``"\ud83d"``, a JavaScript string cut inside a character
  pair) as invalid JSON, with a null id: the client never gets an answer it can match. Such a line is
  passed on with U+FFFD in its place.
- It answers nothing to a line it cannot take as a JSON-RPC message (not JSON, JSON nested deeper than
  its parser goes, JSON that is not a message): it logs it at debug level and drops it, and a client
  waiting for the answer waits for ever. :class:`ScreenedLines` validates every line with the SDK's own
  validator, so it passes on exactly the lines the SDK takes and answers the others as JSON-RPC 2.0 says,
  saying what is wrong (:mod:`agents.mcp_rejection`); a request but a ping before ``initialize``, which
  the SDK answers "Invalid request parameters", gets ``-32600`` saying so. The exception is a malformed
  *response* (an object with ``result`` or ``error`` and no ``method``): JSON-RPC answers no response, and
  two peers answering each other's bad responses would never stop; it is only logged.
- It runs a request under the id of one still in flight (JSON-RPC requires them to differ), and a reply
  would then be taken for the other's. Such a request is answered ``-32600`` and not run
  (:mod:`agents.mcp_inflight`).
- It takes the last value of a key given twice in one object (``{"line": 3, "line": 30}``). No client
  that sends objects writes that; of a line written by hand neither value can be said to be the one
  meant, so a message giving a key twice, at any depth, is answered ``-32600`` naming the key (a
  notification, which gets no answer, is logged and dropped).

Answers go out on the SDK's own write stream, so they never interleave with its replies on stdout.
Each rejected line is also reported on stderr. Blank lines are skipped: there is nothing to answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import select
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import CancelledError
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast

import anyio
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic_core import from_json

from agents.adapter import stderr_log
from agents.mcp_inflight import Reply, RequestsInFlight, reply_of
from agents.mcp_rejection import (
    is_notification,
    is_response,
    jsonrpc_error,
    keys_twice,
    message_id,
    overlong_error,
    rejection,
    surrogates_mended,
)
from bus.display import cut, one_line
from bus.envelope import MAX_ENVELOPE_BYTES

if TYPE_CHECKING:  # the SDK's stream protocols live in a private module: only named for the types
    from mcp.shared._stream_protocols import ReadStream, WriteStream

__all__ = [
    "MAX_LINE_BYTES",
    "After",
    "Overlong",
    "ScreenedLines",
    "StdinLines",
    "WrittenLines",
    "screened_stdio",
]

MAX_LINE_BYTES: Final = 4 * MAX_ENVELOPE_BYTES
"""The longest line taken, newline excluded. A tool call publishes one envelope of at most
``MAX_ENVELOPE_BYTES``; its arguments can take three times as many bytes in the line when the client
escapes every non-ASCII character (``\\u00e9``: 6 bytes for 2), and four times leaves room for the
JSON-RPC frame. A longer line cannot carry a call that would be published."""

_READ_BYTES: Final = 1 << 16
_JSON_SPACE: Final = " \t\r\n"


@dataclass(frozen=True)
class Overlong:
    """Stands for a line over ``limit`` bytes, dropped as it was read."""

    limit: int


class StdinLines:
    """The lines of a file descriptor as text (an over-long one as :class:`Overlong`), read by a daemon
    thread with unbuffered reads: one blocked in ``sys.stdin`` would hold its lock at shutdown."""

    def __init__(self, fd: int, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self.max_line_bytes = max_line_bytes
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[str | Overlong | None] = asyncio.Queue(maxsize=1)
        threading.Thread(target=self._pump, args=(fd,), name="mcp-stdin", daemon=True).start()

    def _pump(self, fd: int) -> None:
        pending = bytearray()
        skipping = False  # through the rest of an over-long line, up to its newline
        try:
            while chunk := _read(fd):
                *ended, rest = chunk.split(b"\n")
                for piece in ended:
                    if not skipping and self._append(pending, piece):
                        self._put(pending.decode("utf-8", errors="replace") + "\n")
                    pending.clear()
                    skipping = False
                if not skipping:
                    skipping = not self._append(pending, rest)
        except OSError:
            pass  # stdin closed under us: the same as its end
        if pending:
            self._put(pending.decode("utf-8", errors="replace"))
        self._put(None)

    def _append(self, pending: bytearray, piece: bytes) -> bool:
        """Add ``piece`` to the line; False when that makes it too long (it is dropped and reported)."""
        if len(pending) + len(piece) > self.max_line_bytes:
            pending.clear()
            self._put(Overlong(self.max_line_bytes))
            return False
        pending += piece
        return True

    def _put(self, line: str | Overlong | None) -> None:
        with contextlib.suppress(RuntimeError, CancelledError):  # the loop is closed: nobody reads
            asyncio.run_coroutine_threadsafe(self._queue.put(line), self._loop).result()

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str | Overlong:
        line = await self._queue.get()
        if line is None:
            raise StopAsyncIteration
        return line


_REVISION_KEY: Final = "io.modelcontextprotocol/protocolVersion"


def _stateless(message: object) -> bool:
    """Whether ``message`` names its protocol revision itself (in ``params._meta``), as the revisions
    without an ``initialize`` have every request do."""
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and _REVISION_KEY in meta


def _read(fd: int) -> bytes:
    """The next bytes of ``fd`` (b"" at its end), waiting for them also when the descriptor was handed
    over non-blocking (a parent sharing the pipe may leave it so): its ``EAGAIN`` is no end. Its flags
    are the parent's too, so they are left as they are."""
    while True:
        try:
            return os.read(fd, _READ_BYTES)
        except BlockingIOError:
            select.select([fd], [], [])


def _method(message: object) -> object:
    """The method of ``message`` when it is a request; None for any other."""
    return message.get("method") if isinstance(message, dict) and "id" in message else None


@dataclass(frozen=True)
class _Screened:
    """What the checks that need no state of the session make of a line (:func:`_screen`)."""

    passed: str
    """The line as it would be passed on: lone surrogate escapes mended."""
    rejected: types.JSONRPCError | None
    """Why the SDK would not take it as a JSON-RPC message."""
    twice: types.JSONRPCError | None
    """The keys it gives twice in one object."""
    message: object
    """The message, parsed, when it is not ``rejected``."""
    response: bool = False
    notification: bool = False
    """Whether a rejected line, or one with keys ``twice``, is meant as a response, or a notification."""


def _screen(line: str) -> _Screened:
    """Check ``line`` as far as no state of the session is needed. Run in a worker thread: each check
    parses the whole line (up to :data:`MAX_LINE_BYTES`, seconds of work for one of millions of tiny
    objects), and the event loop should go on meanwhile, keeping fresh the directive a wait holds (else
    another listener takes it after ``--claim-idle-ms`` and it is delivered twice). It does between the
    checks written in Python; the SDK's validator holds the interpreter while it runs (README, "MCP")."""
    text = line.removesuffix("\n")  # or a JSON error's position would be on a line 2
    rejected = rejection(text)
    mended = (
        surrogates_mended(text) if rejected is not None and rejected.error.code == types.PARSE_ERROR else None
    )
    if mended is not None:
        rejected = rejection(mended)
    passed = line if mended is None else mended + "\n"
    twice = keys_twice(text) if rejected is None else None
    if rejected is None and twice is None:
        return _Screened(passed, None, None, from_json(passed))
    message = from_json(passed) if rejected is None else None
    return _Screened(passed, rejected, twice, message, is_response(text), is_notification(text))


class ScreenedLines:
    """The lines the SDK takes as JSON-RPC messages; every other line is answered on its write stream
    (given by :meth:`answer_on` once it exists) and reported with ``log``."""

    def __init__(
        self,
        lines: AsyncIterator[str | Overlong],
        *,
        log: Callable[[str], None] = stderr_log,
        at_end: Callable[[RequestsInFlight], Awaitable[None]] | None = None,
        endless: Callable[[dict[str, Any]], bool] = lambda _request: False,
    ) -> None:
        self._lines = lines
        self.log = log
        self._at_end = at_end
        """Awaited at the end of the input, before the SDK hears of it (it cancels what is in flight)."""
        self._endless = endless
        """Whether a request may take longer than is waited for at the end of the input (a wait for a
        directive): it is not awaited then (:meth:`RequestsInFlight.take`)."""
        self.in_flight = RequestsInFlight()
        """The requests passed on and not yet answered (:mod:`agents.mcp_inflight`)."""
        self._send: Callable[[SessionMessage], Awaitable[None]] | None = None
        self._ready = asyncio.Event()
        self._initialized = False

    def answer_on(self, send: Callable[[SessionMessage], Awaitable[None]]) -> None:
        self._send = send
        self._ready.set()

    def __aiter__(self) -> ScreenedLines:
        return self

    async def __anext__(self) -> str:
        while (line := await anext(self._lines, None)) is not None:
            if isinstance(line, Overlong):
                error, seen = overlong_error(line.limit), f"a line over {line.limit} bytes"
            elif not line.strip(_JSON_SPACE):
                continue
            else:
                screened = await asyncio.to_thread(_screen, line)
                found = screened.rejected or self._premature(screened.message)
                valid = found is None  # but maybe for keys given twice
                if found is None and (found := screened.twice or self._reused(screened.message)) is None:
                    self._initialized = self._initialized or _method(screened.message) == "initialize"
                    self._cancelling(screened.message)
                    return screened.passed
                text = line.removesuffix("\n")
                error, seen = found, f"a line of {len(text.encode())} bytes: {cut(one_line(text), 80)}"
                if screened.response:
                    self.log(f"dropped a malformed response ({error.error.message}), unanswered: {seen}")
                    continue
                if valid and screened.notification:  # JSON-RPC answers no notification
                    self.log(f"dropped a notification ({error.error.message}), unanswered: {seen}")
                    continue
            self.log(f"answered {error.error.code} ({error.error.message}) to {seen}")
            if error.id is not None:
                self.in_flight.refusing(error.id)
            if not await self._answer(error):
                raise StopAsyncIteration
        if self._at_end is not None:
            await self._at_end(self.in_flight)
        raise StopAsyncIteration

    def _cancelling(self, message: object) -> None:
        """A client's ``notifications/cancelled``: the request it names will not be answered."""
        if isinstance(message, dict) and message.get("method") == "notifications/cancelled":
            params = message.get("params")
            self.in_flight.cancelled(params.get("requestId") if isinstance(params, dict) else None)

    def _premature(self, message: object) -> types.JSONRPCError | None:
        """A request before ``initialize`` (but a ping), which the SDK answers "Invalid request
        parameters" whatever its parameters: the answer says what is wrong instead."""
        if self._initialized or _stateless(message):
            return None
        method = _method(message)
        if method in (None, "initialize", "ping"):
            return None
        assert isinstance(message, dict)  # a request
        why = f"Invalid Request: {method} before initialize (a session starts with an initialize request)"
        return jsonrpc_error(types.INVALID_REQUEST, why, message_id(message))

    def _reused(self, message: object) -> types.JSONRPCError | None:
        """``-32600`` for a request under the id of one still in flight (:mod:`agents.mcp_inflight`),
        which is not run; None for any other message, a request then being taken as in flight."""
        if not isinstance(message, dict) or "method" not in message:
            return None
        request_id = message_id(message)
        if request_id is None or self.in_flight.take(request_id, awaited=not self._endless(message)):
            return None
        return jsonrpc_error(
            types.INVALID_REQUEST,
            f"Invalid Request: id {cut(json.dumps(request_id), 80)} is the id of a request still in "
            "flight; the ids of requests in flight must differ: this one was not run",
            request_id,
        )

    async def _answer(self, error: types.JSONRPCError) -> bool:
        """Send ``error``; False when the write stream is closed (the server is stopping)."""
        await self._ready.wait()
        assert self._send is not None
        try:
            await self._send(SessionMessage(error))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return False
        return True


After = Callable[[], Awaitable[None]]
"""What to do once a line is out on stdout."""


class WrittenLines:
    """The SDK transport's stdout, on a duplicate of fd 1. What each line answers (:func:`reply_of`) is
    given to ``on_writing`` before the line is written, which returns what to run once it was written and
    flushed: the moment a reply is out of the server's hands (a directive is acknowledged then, so that a
    server killed before has it delivered again, as ``listen`` does). The request a line answers leaves
    ``in_flight`` before the line goes out: a client that has the answer may send its id again at once."""

    def __init__(
        self, fd: int, on_writing: Callable[[Reply | None], After | None], in_flight: RequestsInFlight
    ) -> None:
        binary = os.fdopen(fd, "wb", closefd=False)  # see screened_stdio: never closed
        self._file = anyio.wrap_file(io.TextIOWrapper(binary, encoding="utf-8"))
        self._on_writing = on_writing
        self._in_flight = in_flight
        self._after: After | None = None

    async def write(self, text: str) -> None:
        # taken now, not at the flush: a reply out on the wire may be followed by a request under its id
        reply = reply_of(text)
        self._after = self._on_writing(reply)
        self._in_flight.answered(reply)
        await self._file.write(text)  # in a worker thread: a client slow to read blocks no task

    async def flush(self) -> None:
        await self._file.flush()
        after, self._after = self._after, None
        if after is not None:
            await after()


def _nothing(_reply: Reply | None) -> After | None:
    return None


@asynccontextmanager
async def screened_stdio(
    fd: int,
    *,
    log: Callable[[str], None] = stderr_log,
    on_writing: Callable[[Reply | None], After | None] = _nothing,
    at_end: Callable[[RequestsInFlight], Awaitable[None]] | None = None,
    endless: Callable[[dict[str, Any]], bool] = lambda _request: False,
) -> AsyncIterator[tuple[ReadStream[SessionMessage | Exception], WriteStream[SessionMessage]]]:
    """The SDK's stdio transport, reading the screened lines of ``fd`` and writing to stdout through
    :class:`WrittenLines`. While it serves, fd 1 points at stderr, so that stray output (a library's
    print) misses the wire, as the SDK's own transport does. ``at_end`` is awaited at the end of the
    input, before the SDK hears of it, with the requests in flight (none ``endless`` is awaited there)."""
    lines = ScreenedLines(StdinLines(fd), log=log, at_end=at_end, endless=endless)
    wire = os.dup(1)
    os.dup2(2, 1)
    try:
        stdout = WrittenLines(wire, on_writing, lines.in_flight)
        async with stdio_server(stdin=cast(Any, lines), stdout=cast(Any, stdout)) as (
            read_stream,
            write_stream,
        ):
            lines.answer_on(write_stream.send)
            yield read_stream, write_stream
    finally:
        # the wire stays open: a worker thread may still be blocked writing to it
        os.dup2(wire, 1)
