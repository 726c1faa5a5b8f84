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
  validator (:data:`mcp_types.jsonrpc_message_adapter`), so it passes on exactly the lines the SDK takes
  and answers the others as JSON-RPC 2.0 says: ``-32700`` (parse error, id null) for what is not JSON,
  ``-32600`` (invalid request) for JSON that is not a message, with the message's id when it has a valid
  one, and ``-32602`` (invalid params) for a request whose parameters its method does not take (the SDK
  says only "Invalid request parameters", and says it too to any request but a ping before
  ``initialize``, which gets ``-32600`` saying so). The messages say what is wrong (the position of a
  JSON error, the members a message lacks, the parameter and what it should be). The exception is a
  malformed *response* (an object with ``result`` or ``error`` and no ``method``): JSON-RPC answers no
  response, and two peers answering each other's bad responses would never stop; it is only logged.
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
import re
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
from pydantic import ValidationError
from pydantic_core import from_json

from agents.adapter import stderr_log
from agents.json_keys import keys_given_twice, twice_message
from agents.lenient_json import loads_lenient
from agents.mcp_inflight import RequestsInFlight
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
    "keys_twice",
    "overlong_error",
    "rejection",
    "screened_stdio",
]

MAX_LINE_BYTES: Final = 4 * MAX_ENVELOPE_BYTES
_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
"""The longest line taken, newline excluded. A tool call publishes one envelope of at most
``MAX_ENVELOPE_BYTES``; its arguments can take three times as many bytes in the line when the client
escapes every non-ASCII character (``\\u00e9``: 6 bytes for 2), and four times leaves room for the
JSON-RPC frame. A longer line cannot carry a call that would be published."""

_READ_BYTES: Final = 1 << 16
_JSON_SPACE: Final = " \t\r\n"
_MEMBERS: Final = {
    "JSONRPCRequest": "request",
    "JSONRPCNotification": "notification",
    "JSONRPCResponse": "response",
    "JSONRPCError": "error response",
}


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
            while chunk := os.read(fd, _READ_BYTES):
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


def rejection(line: str) -> types.JSONRPCError | None:
    """The error that answers ``line``, or None when the SDK takes it as a JSON-RPC message."""
    try:
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        if first["type"] == "json_invalid":
            return _parse_error(str(first["msg"]).removeprefix("Invalid JSON: "))
        return _invalid_request(line, exc)
    # A request whose id is no string or integer passes as a notification (its id ignored), which gets
    # no answer: its sender would wait for ever.
    if isinstance(message, types.JSONRPCNotification) and "id" in from_json(line):
        return _error(types.INVALID_REQUEST, 'Invalid Request: "id" must be a string or an integer')
    if isinstance(message, types.JSONRPCRequest):
        return _invalid_params(message)
    return None


def _invalid_params(request: types.JSONRPCRequest) -> types.JSONRPCError | None:
    """``-32602`` saying which parameter is wrong, for a request of a method the SDK knows (it answers
    "Invalid request parameters" and nothing more); None for valid ones and unknown methods."""
    call = (
        {"method": request.method}
        if request.params is None
        else {"method": request.method, "params": request.params}
    )
    try:
        types.client_request_adapter.validate_python(call, by_name=False)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        # the union's errors come per kind of request; the one this is has no error on its method
        wrong_method = {e["loc"][0] for e in errors if e["loc"][1:2] == ("method",)}
        kinds = {e["loc"][0] for e in errors} - wrong_method
        if len(kinds) != 1:
            return None  # an unknown method: the SDK says so
        kind = kinds.pop()
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}" for e in errors if e["loc"][0] == kind
        )
        return _error(types.INVALID_PARAMS, f"Invalid params: {problems}", request.id)
    return None


def _mended(line: str) -> str | None:
    """``line`` with its lone surrogate escapes as U+FFFD (:mod:`agents.lenient_json`); None when it has
    none, or is not JSON even so."""
    if _SURROGATE_ESCAPE.search(line) is None:
        return None
    value = loads_lenient(line)
    return None if value is None else json.dumps(value, ensure_ascii=False)


def overlong_error(limit: int) -> types.JSONRPCError:
    """The answer to a line over ``limit`` bytes (which was not read, so its id is unknown)."""
    return _error(
        types.INVALID_REQUEST,
        f"Invalid Request: the line is longer than the {limit}-byte limit; it was discarded up to its "
        "newline",
    )


def _error(code: int, message: str, id: types.RequestId | None = None) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=id, error=types.ErrorData(code=code, message=message))


def _parse_error(detail: str) -> types.JSONRPCError:
    if "recursion limit" in detail:
        return _error(
            types.PARSE_ERROR,
            f"Parse error: arrays and objects nested too deeply for the JSON parser ({detail}); "
            "send a flatter message",
        )
    return _error(types.PARSE_ERROR, f"Parse error: not valid JSON: {detail}")


def _invalid_request(line: str, exc: ValidationError) -> types.JSONRPCError:
    try:
        value = from_json(line)
    except ValueError:  # the validator parsed it, so this parse does too
        value = None
    if isinstance(value, dict):
        return _error(types.INVALID_REQUEST, f"Invalid Request: {_describe(value, exc)}", _request_id(value))
    if isinstance(value, list):
        detail = "a batch (JSON array) is not supported: send one JSON-RPC message per line"
    else:
        detail = f"a JSON-RPC message is a JSON object, not {_kind(value)}"
    return _error(types.INVALID_REQUEST, f"Invalid Request: {detail}")


def _describe(message: dict[str, Any], exc: ValidationError) -> str:
    """What is wrong with ``message``, as the kind of message it looks like."""
    if "method" not in message and "error" in message:
        member = "JSONRPCError"
    elif "method" not in message and "result" in message:
        member = "JSONRPCResponse"
    else:
        member = "JSONRPCRequest" if "id" in message else "JSONRPCNotification"
    errors = [e for e in exc.errors(include_url=False) if e["loc"][:1] == (member,)]
    problems: dict[str, str] = {}
    for err in errors or exc.errors(include_url=False)[:1]:
        where = ".".join(str(part) for part in err["loc"][1:]) or "message"
        if err["loc"][1:2] == ("id",) and err["type"] != "missing":  # one error per type of the union
            problems.setdefault("id", '"id" must be a string or an integer')
        elif err["type"] == "missing":
            problems.setdefault(where, f'"{where}" is missing')
        else:
            problems.setdefault(where, f'"{where}": {err["msg"]}')
    return f"not a JSON-RPC {_MEMBERS[member]}: {'; '.join(list(problems.values())[:3])}"


def keys_twice(line: str) -> types.JSONRPCError | None:
    """``-32600`` naming the keys ``line`` (a JSON-RPC message) gives more than once in one object, at
    any depth; None when it gives each once. The SDK would take the last value of each: no client that
    sends objects writes such a line, and of one written by hand neither value can be said to be meant,
    so it is refused, as ``findings add`` refuses such a finding."""
    twice = keys_given_twice(line)
    if not twice.keys:
        return None
    return _error(
        types.INVALID_REQUEST,
        f"Invalid Request: {twice_message(twice.keys)}",
        None if "id" in twice.outermost else _request_id(from_json(line)),
    )


def _is_notification(line: str) -> bool:
    """Whether ``line`` is a JSON object with a ``method`` and no ``id``."""
    try:
        message = from_json(line)
    except ValueError:
        return False
    return isinstance(message, dict) and "method" in message and "id" not in message


def _is_response(line: str) -> bool:
    """Whether ``line`` is meant as a response (a JSON object with ``result`` or ``error``, no ``method``)."""
    try:
        message = from_json(line)
    except ValueError:
        return False
    return (
        isinstance(message, dict) and "method" not in message and ("result" in message or "error" in message)
    )


def _request_id(message: dict[str, Any]) -> types.RequestId | None:
    """The message's id, when it is one JSON-RPC allows (a string or an integer)."""
    value = message.get("id")
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return None


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a string" if isinstance(value, str) else "a number"


class ScreenedLines:
    """The lines the SDK takes as JSON-RPC messages; every other line is answered on its write stream
    (given by :meth:`answer_on` once it exists) and reported with ``log``."""

    def __init__(
        self, lines: AsyncIterator[str | Overlong], *, log: Callable[[str], None] = stderr_log
    ) -> None:
        self._lines = lines
        self.log = log
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
                text = line.removesuffix("\n")  # or a JSON error's position would be on a line 2
                found = rejection(text) or self._premature(text)
                mended = (
                    _mended(text) if found is not None and found.error.code == types.PARSE_ERROR else None
                )
                if mended is not None:
                    found = rejection(mended) or self._premature(mended)
                valid = found is None  # but maybe for keys given twice
                passed = line if mended is None else mended + "\n"
                if found is None and (found := keys_twice(text) or self._reused(passed)) is None:
                    return passed
                error, seen = found, f"a line of {len(text.encode())} bytes: {cut(one_line(text), 80)}"
                if _is_response(text):
                    self.log(f"dropped a malformed response ({error.error.message}), unanswered: {seen}")
                    continue
                if valid and _is_notification(text):  # JSON-RPC answers no notification
                    self.log(f"dropped a notification ({error.error.message}), unanswered: {seen}")
                    continue
            self.log(f"answered {error.error.code} ({error.error.message}) to {seen}")
            if not await self._answer(error):
                break
        raise StopAsyncIteration

    def _premature(self, text: str) -> types.JSONRPCError | None:
        """A request before ``initialize`` (but a ping), which the SDK answers "Invalid request
        parameters" whatever its parameters: the answer says what is wrong instead."""
        if self._initialized:
            return None
        message = from_json(text)
        method = message.get("method") if isinstance(message, dict) and "id" in message else None
        if method == "initialize":
            self._initialized = True
        if method in (None, "initialize", "ping"):
            return None
        why = f"Invalid Request: {method} before initialize (a session starts with an initialize request)"
        return _error(types.INVALID_REQUEST, why, _request_id(message))

    def _reused(self, line: str) -> types.JSONRPCError | None:
        """``-32600`` for a request under the id of one still in flight (:mod:`agents.mcp_inflight`),
        which is not run; None for any other message, a request then being taken as in flight."""
        message = from_json(line)
        if not isinstance(message, dict) or "method" not in message:
            return None
        request_id = _request_id(message)
        if request_id is None or self.in_flight.take(request_id):
            return None
        return _error(
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
    """The SDK transport's stdout, on a duplicate of fd 1. Each line is given to ``on_writing`` before it
    is written, which returns what to run once it was written and flushed: the moment a reply is out of
    the server's hands (a directive is acknowledged then, so that a server killed before has it
    delivered again, as ``listen`` does). The request a line answers leaves ``in_flight`` before the line
    goes out: a client that has the answer may send its id again at once."""

    def __init__(
        self, fd: int, on_writing: Callable[[str], After | None], in_flight: RequestsInFlight
    ) -> None:
        binary = os.fdopen(fd, "wb", closefd=False)  # see screened_stdio: never closed
        self._file = anyio.wrap_file(io.TextIOWrapper(binary, encoding="utf-8"))
        self._on_writing = on_writing
        self._in_flight = in_flight
        self._after: After | None = None

    async def write(self, text: str) -> None:
        # taken now, not at the flush: a reply out on the wire may be followed by a request under its id
        self._after = self._on_writing(text)
        self._in_flight.answered(text)
        await self._file.write(text)  # in a worker thread: a client slow to read blocks no task

    async def flush(self) -> None:
        await self._file.flush()
        after, self._after = self._after, None
        if after is not None:
            await after()


def _nothing(_line: str) -> After | None:
    return None


@asynccontextmanager
async def screened_stdio(
    fd: int,
    *,
    log: Callable[[str], None] = stderr_log,
    on_writing: Callable[[str], After | None] = _nothing,
) -> AsyncIterator[tuple[ReadStream[SessionMessage | Exception], WriteStream[SessionMessage]]]:
    """The SDK's stdio transport, reading the screened lines of ``fd`` and writing to stdout through
    :class:`WrittenLines`. While it serves, fd 1 points at stderr, so that stray output (a library's
    print) misses the wire, as the SDK's own transport does."""
    lines = ScreenedLines(StdinLines(fd), log=log)
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
