"""A launcher that loses Redis between starting an agent and acknowledging its request.

The launcher talks to Redis through a TCP proxy that cuts every connection, and refuses new ones, as
soon as it sees the launcher's first XACK; the adapters it starts connect directly. The agent starts and
ends while the launcher cannot acknowledge, then Redis comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from adapter_kit import exited, open_bus, start, wait_until
from test_launcher import GROUP, launcher_args, request, template

from bus.envelope import EnvelopeType
from bus.keys import StreamKind


class CuttingProxy:
    """Forwards TCP to Redis until a client first sends XACK; from then on, until ``restore``, none passes."""

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 6379
        self.cut = asyncio.Event()
        self._tripped = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"redis://127.0.0.1:{port}/0"

    async def __aexit__(self, *exc: object) -> None:
        self._close_all()
        if self._server is not None:
            self._server.close()

    def restore(self) -> None:
        self.cut.clear()

    def _close_all(self) -> None:
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut.is_set():
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        self._writers |= {writer, up_writer}
        await asyncio.gather(self._pump(reader, up_writer, watch=True), self._pump(up_reader, writer))

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, watch: bool = False
    ) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                if watch and not self._tripped and b"XACK" in data.upper():
                    self._tripped = True
                    self.cut.set()
                if self.cut.is_set():
                    self._close_all()
                    return
                writer.write(data)
                await writer.drain()
        writer.close()


async def test_an_agent_started_before_a_lost_ack_is_not_started_again(
    redis_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "launcher.log"
    proxy = CuttingProxy(redis_url)
    async with open_bus(redis_url) as bus, proxy as proxy_url:
        agent = await request(bus, 1)
        args = launcher_args(tmp_path, template("complete"), "--burst", "--reclaim-ms", "100")
        launcher = start([*args, "--adapter-redis-url", redis_url], proxy_url, log)
        try:
            await asyncio.wait_for(proxy.cut.wait(), 60)

            async def agent_done_and_ack_failed() -> bool:
                return await bus.has(GROUP, EnvelopeType.COMPLETION_REPORT) and "retrying" in log.read_text()

            await wait_until(agent_done_and_ack_failed, 60, "the agent to end while its ack is refused")
            proxy.restore()
            assert await exited(launcher, 60) == 0, log.read_text()
        finally:
            if launcher.poll() is None:
                launcher.kill()
        started = [e.agent_id for e in await bus.of_type(GROUP, EnvelopeType.AGENT_STARTED)]
        assert started == [agent], log.read_text()  # started once, not again when Redis came back
        pending = await bus.client.xpending(bus.stream(GROUP, StreamKind.TASKS), "launchers")
        assert pending["pending"] == 0


@pytest.mark.parametrize("elsewhere", [False, True], ids=["same-log-dir", "another-log-dir"])
async def test_a_launcher_killed_between_start_and_ack_is_not_started_again_on_its_log_dir(
    redis_url: str, tmp_path: Path, elsewhere: bool
) -> None:
    """The agent started, the request was not acknowledged. A launcher on the same log directory (its
    restart) finds the request's mark and does not start it again; one elsewhere, which cannot know,
    starts it again: what the README promises, at least once."""
    log = tmp_path / "launcher.log"
    proxy = CuttingProxy(redis_url)
    async with open_bus(redis_url) as bus, proxy as proxy_url:
        agent = await request(bus, 2)
        args = launcher_args(tmp_path, template("complete"), "--reclaim-ms", "100")
        first = start([*args, "--adapter-redis-url", redis_url], proxy_url, log)
        try:
            await asyncio.wait_for(proxy.cut.wait(), 60)
        finally:
            first.kill()
            first.wait(timeout=10)
        marks = list((tmp_path / "logs").glob("*.started"))
        assert len(marks) == 1, log.read_text()
        other = launcher_args(tmp_path / "elsewhere", template("complete"), "--reclaim-ms", "100")
        second = start([*(other if elsewhere else args), "--burst"], redis_url, log)
        assert await exited(second, 60) == 0, log.read_text()
        starts = 2 if elsewhere else 1

        async def completed() -> bool:  # the first launcher's agent outlives it
            return await bus.count(GROUP, EnvelopeType.COMPLETION_REPORT) == starts

        await wait_until(completed, 60, f"{starts} agent(s) to complete")
        started = [e.agent_id for e in await bus.of_type(GROUP, EnvelopeType.AGENT_STARTED)]
        assert started == [agent] * starts, log.read_text()
        pending = await bus.client.xpending(bus.stream(GROUP, StreamKind.TASKS), "launchers")
        assert pending["pending"] == 0
        assert marks[0].exists() is elsewhere  # acknowledged by the launcher that found it: gone
