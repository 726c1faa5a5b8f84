"""Servers that stop answering: a command fails in bounded time with one line, Ctrl-C exits 130, and a
consumer whose reply was lost takes its entries back at once.

The silent server is a plain TCP listener that accepts and never sends a byte (a stalled server, a
firewall that swallows traffic, a port that is not Redis); the proxy forwards to a real Redis and drops
one reply. Neither imitates Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio
from adapter_kit import CLI
from mcp_kit import call, session, text_of
from workers.kit import progress

from agents.inbox_listener import InboxListener
from bus.cli import EXIT_INTERRUPTED
from bus.cli_connection import run_command
from bus.connection import as_text, connect
from bus.consumer import Ack, Consumer
from bus.directives import AnswerItem, ClarificationResponse
from bus.embedded import RedisProcess, free_port
from bus.envelope import encode, new_envelope
from bus.errors import ConfigError, ConnectionFailed
from bus.keys import Keys, open_namespace
from bus.publisher import Publisher
from bus.settings import MIN_SOCKET_TIMEOUT, Settings
from bus.wire import Pipe
from coordinator.policy import Policy
from coordinator.service import Coordinator, CoordinatorOptions


class Silent:
    """Accepts every connection and reads what it is sent; answers nothing."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.asked = threading.Event()
        """A client sent its first command: it now waits for the reply."""
        self.connections: list[socket.socket] = []
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return  # closed
            self.connections.append(connection)
            reader = threading.Thread(target=self._read, args=(connection,), daemon=True)
            self.threads.append(reader)
            reader.start()

    def _read(self, connection: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while connection.recv(65536):
                self.asked.set()

    def close(self) -> None:
        for sock in (self.listener, *self.connections):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked on it
            sock.close()
        for thread in self.threads:
            thread.join(timeout=10)


@pytest.fixture
def silent() -> Iterator[Silent]:
    server = Silent()
    yield server
    server.close()


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SUBAGENT_BUS_")}


ONE_SHOT = [
    ["status"],
    ["inbox"],
    ["answer", "agent-1", "Q1=yes"],
    ["approve", "request-1"],
    ["findings"],
    ["tail", "--count", "1"],
    ["trim"],
]


def test_one_shot_commands_fail_in_bounded_time_against_a_server_that_never_answers(
    silent: Silent, tmp_path: Path
) -> None:
    timeout = f"{MIN_SOCKET_TIMEOUT:g}"
    runs = [
        subprocess.Popen(
            [CLI, *args, "--redis-url", silent.url, "--socket-timeout", timeout],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(),
            cwd=tmp_path,
        )
        for args in ONE_SHOT
    ]
    runs.append(  # the same through the environment
        subprocess.Popen(
            [CLI, "status", "--redis-url", silent.url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**_env(), "SUBAGENT_BUS_SOCKET_TIMEOUT": timeout},
            cwd=tmp_path,
        )
    )
    try:
        for process in runs:
            out, err = process.communicate(timeout=60)
            assert (process.returncode, out) == (1, b""), (process.args, err)
            assert err.decode() == (
                f"Error: Redis unavailable (TimeoutError): Timeout reading from 127.0.0.1:{silent.port}\n"
            ), process.args
    finally:
        for process in runs:
            if process.poll() is None:
                process.kill()
                process.wait()


def test_a_socket_timeout_below_the_longest_blocking_read_is_a_usage_error(silent: Silent) -> None:
    done = subprocess.run(
        [CLI, "status", "--redis-url", silent.url, "--socket-timeout", "1"],
        capture_output=True,
        env=_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert b"--socket-timeout" in done.stderr
    assert not silent.connections


@pytest.mark.usefixtures("interruptible")
def test_ctrl_c_while_waiting_for_a_reply_exits_130(silent: Silent, tmp_path: Path) -> None:
    process = subprocess.Popen(
        [CLI, "status", "--redis-url", silent.url],  # the default socket timeout: 30 s
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        cwd=tmp_path,
    )
    try:
        # Once its command is sent: Python 3.11's asyncio.wait_for, which redis-py sends with, can
        # swallow a cancellation that lands during the send itself (fixed in 3.12).
        assert silent.asked.wait(timeout=30), "the command never asked anything"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert (process.returncode, out, err) == (EXIT_INTERRUPTED, b"", b"\n")


@pytest.mark.usefixtures("interruptible")
def test_ctrl_c_cancels_again_when_a_cancellation_is_lost() -> None:
    lost = False

    async def loses_the_first_cancellation() -> None:
        nonlocal lost
        os.kill(os.getpid(), signal.SIGINT)
        try:
            await asyncio.Event().wait()  # a reply that never comes
        except asyncio.CancelledError:
            lost = True  # as Python 3.11's asyncio.wait_for can lose it
        await asyncio.Event().wait()

    with pytest.raises(KeyboardInterrupt):
        run_command(loses_the_first_cancellation())
    assert lost
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


async def test_a_silent_sentinel_is_named_and_given_up_on_after_one_socket_timeout(silent: Silent) -> None:
    url = f"redis+sentinel://127.0.0.1:{silent.port}/main"
    with pytest.raises(ConnectionFailed) as info:
        await connect(Settings.from_url(url, socket_timeout=0.3))
    assert str(info.value) == (
        "Redis unavailable (MasterNotFoundError): no Sentinel gives the address of master 'main': "
        f"127.0.0.1:{silent.port} did not answer within 0.3s"
    )
    assert len(silent.connections) == 1  # not retried: the next Sentinel of the list is the retry


def test_consumers_refuse_a_block_the_socket_timeout_would_cut() -> None:
    client = redis.asyncio.Redis.from_url("redis://127.0.0.1:1/0", socket_timeout=2)
    with pytest.raises(ConfigError, match=r"block_ms 2000 is not below the client's socket timeout \(2s\)"):
        Consumer(client, "s", "g", "c", block_ms=2000)
    Consumer(client, "s", "g", "c", block_ms=1999)
    cluster = redis.asyncio.RedisCluster(host="127.0.0.1", port=1, socket_timeout=0.5)
    with pytest.raises(ConfigError, match="block_ms 1000"):
        Consumer(cluster, "{s}", "g", "c")
    Consumer(cluster, "{s}", "g", "c", block_ms=0)  # a read that does not block
    with pytest.raises(ConfigError, match="block_ms 2000"):
        Coordinator(client, Keys("ns", 4), Policy(), CoordinatorOptions(block_ms=2000))
    Coordinator(client, Keys("ns", 4), Policy(), CoordinatorOptions(block_ms=1999))


def _reads_new(request: bytes) -> bool:
    return b"XREADGROUP" in request and b"\r\n>\r\n" in request


class DroppingProxy:
    """Forwards to a real Redis, but drops every reply on the connection that sent a request matching
    ``trigger`` first (by default one asking for new entries, ``XREADGROUP ... >``): the server
    delivered them, the client never hears of it."""

    def __init__(self, upstream_port: int, trigger: Callable[[bytes], bool] = _reads_new) -> None:
        self.upstream_port = upstream_port
        self.trigger = trigger
        self.dropped = asyncio.Event()
        self._armed = True
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        self.server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        drop = False

        async def requests() -> None:
            nonlocal drop
            while data := await reader.read(65536):
                if self._armed and self.trigger(data):
                    self._armed, drop = False, True
                up_writer.write(data)
                await up_writer.drain()

        async def replies() -> None:
            while data := await up_reader.read(65536):
                if drop:
                    self.dropped.set()
                    continue
                writer.write(data)
                await writer.drain()

        tasks = {asyncio.create_task(requests()), asyncio.create_task(replies())}
        self._tasks |= tasks
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            up_writer.close()
            writer.close()


async def test_entries_of_a_lost_reply_come_back_on_the_next_read(
    redis_server: RedisProcess, redis_url: str
) -> None:
    direct = redis_server.client()
    direct.xgroup_create("lost", "g", id="0", mkstream=True)
    entry_id = as_text(direct.xadd("lost", {"data": encode(progress(1))}))
    proxy = DroppingProxy(redis_server.port)
    port = await proxy.start()
    client = await connect(Settings.from_url(f"redis://127.0.0.1:{port}/0", socket_timeout=0.5))
    try:
        # reclaim_idle_ms far away: only the consumer's own pending list can give the entry back
        consumer = Consumer(client, "lost", "g", "c", block_ms=100, reclaim_idle_ms=600_000)
        with pytest.raises(ConnectionFailed, match="Timeout"):
            await consumer.read()
        assert proxy.dropped.is_set()
        assert direct.xpending("lost", "g")["pending"] == 1  # delivered to "c", never seen by it
        [delivery] = await consumer.read()
        assert (delivery.entry_id, delivery.envelope) == (entry_id, progress(1))
        await consumer.settle([(delivery, Ack.ACK, None)])
        assert direct.xpending("lost", "g")["pending"] == 0
    finally:
        await client.aclose()
        await proxy.close()
        direct.close()


async def test_entries_of_a_lost_claim_come_back_on_the_next_read(
    redis_server: RedisProcess, redis_url: str
) -> None:
    direct = redis_server.client()
    direct.xgroup_create("lost", "g", id="0", mkstream=True)
    entry_id = as_text(direct.xadd("lost", {"data": encode(progress(1))}))
    direct.xreadgroup("g", "dead", {"lost": ">"})  # a consumer that died holding the entry long ago
    direct.xclaim("lost", "g", "dead", 0, [entry_id], idle=600_000)
    proxy = DroppingProxy(redis_server.port, trigger=lambda request: b"XAUTOCLAIM" in request)
    port = await proxy.start()
    client = await connect(Settings.from_url(f"redis://127.0.0.1:{port}/0", socket_timeout=0.5))
    try:
        consumer = Consumer(client, "lost", "g", "c", block_ms=100, reclaim_idle_ms=60_000)
        with pytest.raises(ConnectionFailed, match="Timeout"):
            await consumer.read()
        assert proxy.dropped.is_set()
        [row] = direct.xpending_range("lost", "g", min="-", max="+", count=1)
        assert row["consumer"] == b"c"  # claimed for "c", which never saw it; not idle enough to claim again
        [delivery] = await consumer.read()
        assert (delivery.entry_id, delivery.envelope) == (entry_id, progress(1))
    finally:
        await client.aclose()
        await proxy.close()
        direct.close()


async def test_connections_carry_tcp_bounds_from_the_socket_timeout(redis_url: str) -> None:
    # a held connection (the coordinator's shard loops) times no wait itself: TCP ends it instead
    client = await connect(Settings.from_url(redis_url, socket_timeout=12))
    try:
        pipe = Pipe(client, "k", hold=True)
        await pipe.execute([(b"PING",)])
        connection, _ = pipe._held  # type: ignore[misc]
        assert connection._writer is not None
        sock = connection._writer.get_extra_info("socket")
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 12_000
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 4
        await pipe.close()
    finally:
        await client.aclose()


def test_listen_gives_up_at_its_own_timeout_on_a_server_that_never_answers(silent: Silent) -> None:
    # the socket timeout (30 s by default) is far beyond --timeout: the handshake must not hold it
    done = subprocess.run(
        [CLI, "listen", "--agent-id", "a", "--group", "g", "--timeout", "1", "--redis-url", silent.url],
        capture_output=True,
        env=_env(),
        timeout=20,
        check=False,
    )
    assert (done.returncode, done.stdout) == (3, b""), done.stderr
    assert done.stderr.decode() == "subagent-bus: no directive for a within 1s: the server did not answer\n"


async def test_a_listener_gives_up_at_its_deadline_when_the_server_stops_answering(
    redis_server: RedisProcess, redis_url: str
) -> None:
    redis_server.client().xgroup_create("inbox-stall", "adapter", id="0", mkstream=True)
    proxy = DroppingProxy(redis_server.port)  # the first XREADGROUP's reply, and all after it, never come
    port = await proxy.start()
    client = await connect(Settings.from_url(f"redis://127.0.0.1:{port}/0"))  # socket timeout 30 s
    logged: list[str] = []
    try:
        listener = InboxListener(client, "inbox-stall", log=logged.append)
        assert await asyncio.wait_for(listener.next(1.0), 20) is None
        assert proxy.dropped.is_set()
        assert logged == ["inbox inbox-stall: the server did not answer within 1s"]
        assert listener.unanswered
    finally:
        await client.aclose()
        await proxy.close()


async def test_listen_that_printed_its_directive_is_not_held_by_an_acknowledgement_never_answered(
    redis_server: RedisProcess, redis_url: str
) -> None:
    """The agent has the directive: a stalled server held ``listen`` (and the runner its exit wakes) for
    the socket timeout (30 s) before it exited."""
    sent = new_envelope(
        ClarificationResponse(answers=[AnswerItem(question_id="Q1", question="Which?", answer="JWT")]),
        agent_id="a1",
        group_id="g",
        source="coordinator",
    )
    client = await connect(Settings.from_url(redis_url))
    try:
        await Publisher(client, await open_namespace(client, "sbus")).send_directive(sent)
    finally:
        await client.aclose()
    proxy = DroppingProxy(redis_server.port, trigger=lambda request: b"XACK" in request)
    port = await proxy.start()
    try:
        command = [CLI, "listen", "--agent-id", "a1", "--group", "g", "--timeout", "5"]
        command += ["--redis-url", f"redis://127.0.0.1:{port}/0"]
        done = await asyncio.to_thread(
            subprocess.run, command, capture_output=True, env=_env(), timeout=20, check=False
        )
        assert proxy.dropped.is_set()
    finally:
        await proxy.close()
    assert done.returncode == 0, done.stderr
    assert "JWT" in done.stdout.decode()
    assert b"printed, but not acknowledged (no answer within 10s)" in done.stderr


async def test_wait_for_directive_says_the_bus_did_not_answer_rather_than_that_no_directive_came(
    redis_server: RedisProcess, redis_url: str
) -> None:
    # it answered "no directive within 1 s", no error: the agent had no way to tell a silent bus
    proxy = DroppingProxy(redis_server.port)  # the first XREADGROUP's reply, and all after it, never come
    port = await proxy.start()
    try:
        async with session(f"redis://127.0.0.1:{port}/0") as client:
            result = await call(client, "wait_for_directive", {"timeout_seconds": 1})
        assert proxy.dropped.is_set()
        assert result.is_error
        assert text_of(result).startswith("the bus did not answer within 1 s"), text_of(result)
    finally:
        await proxy.close()


async def test_wait_for_directive_on_a_server_down_until_its_timeout_says_it_could_not_reach_it(
    fresh_redis: RedisProcess,
) -> None:
    """Not that the bus is stalled: the connection is refused, and the error says so."""
    async with session(fresh_redis.url) as client:
        first = await call(client, "wait_for_directive", {"timeout_seconds": 0.2})
        assert not first.is_error and text_of(first) == "no directive within 0.2 s"
        fresh_redis.kill()
        result = await call(client, "wait_for_directive", {"timeout_seconds": 2})
    assert result.is_error
    assert text_of(result).startswith("the bus failed: Redis unavailable (ConnectionError)"), text_of(result)


async def test_an_mcp_tool_call_gives_up_at_its_publish_timeout_connecting_included(silent: Silent) -> None:
    started = asyncio.get_running_loop().time()
    async with session(silent.url, "--publish-timeout", "1", "--socket-timeout", "20") as client:
        result = await call(client, "report_progress", {"percent": 5})
    assert result.is_error
    assert "the bus could not be reached within 1s; the report_progress call was not published" in text_of(
        result
    )
    assert asyncio.get_running_loop().time() - started < 15  # the socket timeout was 20 s


async def test_an_mcp_tool_call_waits_its_publish_timeout_for_a_server_that_is_down() -> None:
    """Not an error at the first refused connection: a server restarting is waited for, as once connected."""
    async with session(f"redis://127.0.0.1:{free_port()}/0", "--publish-timeout", "1") as client:
        result = await call(client, "report_progress", {"percent": 5})
    assert result.is_error
    text = text_of(result)
    assert text.startswith("the bus could not be reached within 1s (Redis unavailable"), text
    assert text.endswith("; the report_progress call was not published"), text


async def test_an_mcp_status_call_is_not_held_up_by_a_publish_waiting_for_the_server() -> None:
    """Only a publishing call waits for a server that is down; a status call meanwhile reports at once."""
    async with session(f"redis://127.0.0.1:{free_port()}/0", "--publish-timeout", "5") as client:
        publishing = asyncio.create_task(call(client, "report_progress", {"percent": 5}))
        await asyncio.sleep(0.5)  # the publish's first try is refused: it now waits to try again
        status = await call(client, "status", {})
        assert status.is_error and "Redis unavailable" in text_of(status), text_of(status)
        assert not publishing.done()  # before: the status call waited until the publish gave up
        assert "could not be reached within 5s" in text_of(await publishing)
