"""The adapter's stdin as :data:`~agents.agent_output.Chunks` (``adapter stdin``: an agent's output
piped in)."""

from __future__ import annotations

import asyncio
import os
import stat
import sys

from agents.agent_output import CHUNK, Chunks

__all__ = ["stdin_chunks"]


async def stdin_chunks() -> Chunks:
    """A reader of the adapter's stdin: a pipe, socket or terminal without blocking the loop; a file, or
    a device such as ``/dev/null`` (stdin under cron, nohup, CI), which the loop cannot watch, read
    directly (a regular file) or in a thread."""
    fd = sys.stdin.fileno()
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode):

        async def from_file() -> bytes:
            return os.read(fd, CHUNK)

        return from_file
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)):

        async def from_device() -> bytes:
            return await asyncio.to_thread(os.read, fd, CHUNK)

        return from_device
    reader = asyncio.StreamReader(limit=CHUNK)
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", 0, closefd=False)
    )

    async def from_pipe() -> bytes:
        return await reader.read(CHUNK)

    return from_pipe
