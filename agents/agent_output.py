"""The output of an agent's processes, one turn after another (or of the pipe ``adapter stdin`` reads):
its stdout copied to the adapter's stdout and parsed into envelopes that are published as they arrive,
its stderr copied on (or to ``--stderr-log``) with its last lines kept for the exit report.

An output that ends within a line and pauses there for :data:`_PAUSE_S` has that line looked at as it
is, so that a closing tag printed without its newline is published without waiting for the next line.
The time spent waiting for Redis to take what was read is counted (:meth:`AgentOutput.redis_wait`): the
reading after the agent exited is given a time that does not count it (:mod:`agents.process`).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Final

from agents.adapter import AgentBus, OutputStream
from agents.agent_process import StderrTail
from agents.delegate_wait import DelegateWait
from agents.transcript import Format
from bus.envelope import Envelope

__all__ = ["CHUNK", "AgentOutput", "Chunks"]

CHUNK: Final = 64 * 1024

Chunks = Callable[[], Awaitable[bytes]]
"""The next bytes of an output; empty at its end."""
_PAUSE_S: Final = 0.2
"""How long an output that ends within a line must pause before that line is looked at as it is."""


class AgentOutput:
    """What the agent's processes print, read turn after turn."""

    def __init__(
        self,
        bus: AgentBus,
        delegates: DelegateWait,
        *,
        fmt: Format,
        tee: bool,
        stderr_log: Path | None,
    ) -> None:
        self.bus = bus
        self.fmt = fmt
        self.stderr_log = stderr_log
        self.stream: OutputStream | None = None
        self.turn: OutputStream | None = None
        """The output of the turn running or that ran last (None while a turn starts)."""
        self._delegates = delegates
        self._stderr: IO[bytes] | None = None
        self._session_id: str | None = None
        self._tee = tee
        self._waited_for_redis = 0.0
        self._publishing_since: float | None = None
        """While the output's reader waits for Redis to take what it read (see :meth:`redis_wait`)."""

    @property
    def session_id(self) -> str | None:
        """The session id the output carried last (a transcript)."""
        if self.stream is not None and self.stream.session_id:
            self._session_id = self.stream.session_id
        return self._session_id

    async def pump(self, chunks: Chunks, source: str) -> None:
        """Read one turn's output to its end, copying it and publishing what it says."""
        if self.stream is not None and self.stream.session_id:
            self._session_id = self.stream.session_id
        stream = self.stream = self.turn = OutputStream(self.bus, source, self.fmt)
        partial = False  # the output read so far ends within a line
        while chunk := await (self._after_pause(chunks, stream) if partial else chunks()):
            self.copy(chunk)
            partial = not chunk.endswith(b"\n")
            await self._signalled(stream.feed(chunk), wait=False)
        await self._signalled(stream.close(), wait=True)

    async def _after_pause(self, chunks: Chunks, stream: OutputStream) -> bytes:
        """The next chunk of an output that ends within a line; if the output pauses there for
        :data:`_PAUSE_S`, what the pause completes (a closing tag without its newline) is published first."""
        reading = asyncio.ensure_future(chunks())
        try:
            done, _ = await asyncio.wait({reading}, timeout=_PAUSE_S)
            if not done:
                await self._signalled(stream.settle(), wait=False)
            return await reading
        finally:
            reading.cancel()  # when this task is cancelled: nothing once the read is done

    async def _signalled(self, envelopes: list[Envelope], *, wait: bool) -> None:
        if envelopes or wait:
            self._delegates.signalled(envelopes)
            await self._publish(envelopes, wait=wait)

    async def _publish(self, envelopes: list[Envelope], *, wait: bool) -> None:
        """Publish what the agent printed, counting the time spent waiting for Redis to take it."""
        self._publishing_since = time.monotonic()
        try:
            await self.bus.publish(envelopes, wait=wait)
        finally:
            self._waited_for_redis += time.monotonic() - self._publishing_since
            self._publishing_since = None

    def redis_wait(self) -> float:
        """Seconds the output's reader has spent waiting for Redis to take what it read, so far."""
        since = self._publishing_since
        return self._waited_for_redis + (time.monotonic() - since if since is not None else 0.0)

    def copy(self, chunk: bytes) -> None:
        """Copy the agent's output to stdout; a closed stdout stops the copying, not the adapter."""
        if not self._tee:
            return
        try:
            if sys.stdout is None:  # started with it closed (`>&-`)
                raise OSError("stdout is closed")
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
        except (OSError, ValueError) as exc:
            self._tee = False
            self.bus.warn(f"stopped copying the agent's output to stdout: {exc}")

    async def pump_stderr(self, reader: asyncio.StreamReader, tail: StderrTail) -> None:
        """Read the agent's stderr to its end, copying it on and keeping its last lines in ``tail``."""
        sink: IO[bytes] | None = self._stderr_sink()
        while chunk := await reader.read(CHUNK):
            tail.add(chunk)
            if sink is None:
                continue
            try:
                sink.write(chunk)
                sink.flush()
            except (OSError, ValueError):
                sink = None  # nowhere to copy it; the tail is still reported

    def _stderr_sink(self) -> IO[bytes] | None:
        if self.stderr_log is None:
            return sys.stderr.buffer if sys.stderr is not None else None  # None: started with it closed
        if self._stderr is None:
            try:
                self._stderr = self.stderr_log.open("ab")
            except OSError as exc:  # checked when the adapter started: removed since
                self.bus.warn(f"not copying the agent's stderr to {self.stderr_log}: {exc}")
                return None
        return self._stderr
