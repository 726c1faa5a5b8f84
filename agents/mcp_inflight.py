"""The ids of the requests ``subagent-bus mcp`` has taken and not yet answered on its stdout.

JSON-RPC requires the ids of requests in flight to differ, and the server relies on it: the reply that
carries a directive is matched to its request by id when it is written, and the directive acknowledged
then (:mod:`agents.mcp_server`). Two ``wait_for_directive`` calls under one id, both holding a directive
before either reply is written, would have one directive acknowledged at the other's reply and the other
left pending, to be delivered again. The SDK runs such a request all the same, so the screening of stdin
(:class:`agents.mcp_stdio.ScreenedLines`) refuses it, ``-32600``, before the SDK sees it.

An id is in flight from the moment its request is passed on until a response with that id goes out on
stdout (just before: a client may send the id again as soon as it has the response). The refusal of a
request under an id in flight carries that id too, as does any other error the screen writes in reply to a
line it does not pass on (a malformed request): it is counted, so that its line does not end the first
request's flight (whichever of the two lines is written first). Ids are matched as the SDK matches them:
a string of an integer is that integer (``"07"`` is ``7``). A request cancelled before it was answered
is never answered: its id stays taken, which costs nothing to a client that follows MCP, which forbids
reusing an id within a session at all.

At the end of the input the server answers what is in flight before it stops (the SDK would cancel it,
answering "Connection closed" to a call that may have been published): the requests to be answered then
are those taken :meth:`~RequestsInFlight.take` ``awaited`` and neither answered nor cancelled by the
client since (:meth:`~RequestsInFlight.settled`).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from typing import Final, NamedTuple

import mcp_types as types
from mcp.shared.dispatcher import coerce_request_id
from pydantic_core import from_json

__all__ = ["Reply", "RequestsInFlight", "reply_of"]

_LONG_ID: Final = 64
"""A string id longer than this is kept as its digest: a cancelled request's id is kept for good."""


def _key(request_id: types.RequestId) -> types.RequestId | bytes:
    request_id = coerce_request_id(request_id)  # as the SDK matches them: "07" is 7
    if isinstance(request_id, str) and len(request_id) > _LONG_ID:
        return hashlib.sha256(request_id.encode(errors="surrogatepass")).digest()
    return request_id


class Reply(NamedTuple):
    """A line the server writes that answers a request: the request's id, and whether it is a result
    (not an error)."""

    request_id: types.RequestId
    result: bool


def reply_of(line: str) -> Reply | None:
    """What ``line``, going out on stdout, answers; None for a notification or a request of the server's
    own. Read once per line, for both the requests in flight and the directives a result acknowledges."""
    try:  # not orjson: it reads an integer beyond 64 bits, which an id may be, as a float
        message = from_json(line)
    except ValueError:
        return None
    if not isinstance(message, dict) or "method" in message:
        return None
    request_id = message.get("id")
    if not isinstance(request_id, (str, int)):
        return None
    return Reply(request_id, "result" in message)


class RequestsInFlight:
    """The ids of the requests taken and not yet answered, and the refusals written under them."""

    def __init__(self) -> None:
        self._ids: set[types.RequestId | bytes] = set()
        self._refusals: Counter[types.RequestId | bytes] = Counter()
        self._awaited: set[types.RequestId | bytes] = set()
        self._changed = asyncio.Event()

    def take(self, request_id: types.RequestId, *, awaited: bool = True) -> bool:
        """Mark ``request_id`` in flight, and, when ``awaited``, to be answered at the end of the input
        (:meth:`settled`); False when it is in flight already (see :meth:`refusing`)."""
        key = _key(request_id)
        if key in self._ids:
            return False
        self._ids.add(key)
        if awaited:
            self._awaited.add(key)
        return True

    def cancelled(self, request_id: object) -> None:
        """The client cancelled a request (``notifications/cancelled``): no answer will come for it."""
        if isinstance(request_id, (str, int)) and self._awaited:
            self._awaited.discard(_key(request_id))
            self._changed.set()

    async def settled(self) -> None:
        """Wait until every request taken ``awaited`` is answered (or cancelled)."""
        while self._awaited:
            self._changed.clear()
            await self._changed.wait()

    def refusing(self, request_id: types.RequestId) -> None:
        """An error the screen writes under ``request_id`` (a request it did not pass on): counted when
        the id is in flight, so that its line does not end that request's flight."""
        key = _key(request_id)
        if key in self._ids:
            self._refusals[key] += 1

    def answered(self, reply: Reply | None) -> None:
        """A line goes out on stdout (:func:`reply_of`): when it answers a request in flight (and is not
        the refusal of another under its id), that request is no longer in flight."""
        if reply is None or not self._ids:
            return
        key = _key(reply.request_id)
        if self._refusals[key]:
            self._refusals[key] -= 1
            if not self._refusals[key]:
                del self._refusals[key]
        else:
            self._ids.discard(key)
            if key in self._awaited:
                self._awaited.discard(key)
                self._changed.set()
