"""A TCP proxy in front of a Redis server that loses one reply.

Every connection is relayed both ways until a command carrying ``marker`` goes through: the proxy
forwards that command, waits for the server's reply (so the command has run), keeps the reply to itself
and closes both sides of that connection. The client sees its connection drop with the command's
outcome unknown, exactly as when a network or a server fails between the write and the reply. Later
connections are relayed untouched.
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["ReplyDroppingProxy"]

_CHUNK = 1 << 16


class ReplyDroppingProxy:
    """Relays 127.0.0.1:``port`` to ``upstream``; drops the reply to the first command with ``marker``."""

    def __init__(self, upstream_host: str, upstream_port: int, marker: bytes) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.marker = marker
        self.dropped_reply: bytes | None = None
        """The reply the client never got (set once the marker went through)."""
        self._armed = True
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        dropping = asyncio.Event()
        upward = asyncio.create_task(self._upward(reader, up_writer, dropping))
        downward = asyncio.create_task(self._downward(up_reader, writer, dropping))
        self._tasks |= {upward, downward}
        try:
            await asyncio.wait({upward, downward}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (upward, downward):
                task.cancel()
            await asyncio.gather(upward, downward, return_exceptions=True)
            self._tasks -= {upward, downward}
            for side in (writer, up_writer):
                side.close()
                with contextlib.suppress(OSError):
                    await side.wait_closed()

    async def _upward(
        self, reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter, dropping: asyncio.Event
    ) -> None:
        tail = b""
        while data := await reader.read(_CHUNK):
            if self._armed and self.marker in tail + data:
                self._armed = False
                dropping.set()  # before forwarding: the reply must not slip through
            tail = data[-len(self.marker) :]
            up_writer.write(data)
            await up_writer.drain()

    async def _downward(
        self, up_reader: asyncio.StreamReader, writer: asyncio.StreamWriter, dropping: asyncio.Event
    ) -> None:
        while data := await up_reader.read(_CHUNK):
            if dropping.is_set():
                self.dropped_reply = data
                return  # closing both sides: the client never sees this reply
            writer.write(data)
            await writer.drain()
