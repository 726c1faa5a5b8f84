"""Pipelines packed here: a batch of commands for one key's server in one write, replies in order.

redis-py's asyncio client packs every command in Python (``Connection.pack_command``, about 5 us for an
XADD of one field) and runs each reply through its response callbacks. On the adapter's hot path, a
hundred XADDs per chunk of agent output, that was half of the time spent publishing. The commands and
the round trips are the ones a redis-py pipeline sends; only the client's work is less: the bytes are
packed by :func:`pack` and the replies are read as the server sent them (hiredis parses them).

A cluster node that answers MOVED or ASK (a slot moved since the client last looked) gets the batch
again through redis-py's own pipeline, which follows redirections and refreshes the slot map. Like any
pipeline that is not a transaction, such a retry can write an entry twice; envelope ids make that
harmless downstream. Connection and timeout errors leave the connection closed, so that no reply of this
batch is read by the next one.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import redis.exceptions as rex
from redis.asyncio import RedisCluster
from redis.asyncio.connection import Connection

from bus.connection import Client, refused_for_now, translated
from bus.errors import CommandFailed

__all__ = ["Command", "Pipe", "Script", "execute", "execute_routed", "pack", "server_time"]

Command = tuple[bytes, ...]
"""A command and its arguments, as bytes."""

_MULTI: Command = (b"MULTI",)
_EXEC: Command = (b"EXEC",)
_REDIRECTED = (rex.MovedError, rex.AskError)
_LOST = (rex.ConnectionError, rex.TimeoutError, OSError, TimeoutError)
_REDISCOVER: weakref.WeakSet[RedisCluster] = weakref.WeakSet()
"""Cluster clients whose connection to a node failed. The node may be gone for good (a master killed, a
replica promoted in its place), and a client's map of slots to nodes, which only MOVED and ASK replies
mend, would send every batch to it again: the next batch asks the cluster for its map first."""


def pack(commands: Sequence[Command]) -> bytes:
    """Commands in the Redis protocol (RESP), their arguments as bulk strings, in one buffer."""
    parts: list[bytes] = []
    heads: dict[Command, bytes] = {}  # a batch repeats all but the last argument (XADD stream * data)
    for command in commands:
        first = command[:-1]
        head = heads.get(first)
        if head is None:
            head = heads[first] = b"".join([b"*%d\r\n" % len(command), *map(_bulk, first)])
        last = command[-1]
        parts += (head, b"$%d\r\n%s\r\n" % (len(last), last))
    return b"".join(parts)


def _bulk(arg: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(arg), arg)


async def execute(
    client: Client, key: str | bytes, commands: Sequence[Command], *, transaction: bool = False
) -> list[Any]:
    """Send ``commands``, all for the server that holds ``key``, in one write; their replies in order.

    With ``transaction`` they run in MULTI/EXEC: all of them or none. An error reply raises
    :class:`~bus.errors.CommandFailed` (after the other replies were read, so the connection stays
    usable); an unreachable server raises :class:`~bus.errors.ConnectionFailed`.
    """
    return await Pipe(client, key).execute(commands, transaction=transaction)


async def server_time(client: Client, key: str | bytes) -> datetime:
    """The clock of the server that holds ``key`` (``TIME``): the one time that the processes of a bus,
    on machines whose clocks differ, share."""
    ((seconds, micros),) = await execute(client, key, [(b"TIME",)])
    return datetime.fromtimestamp(int(seconds), UTC) + timedelta(microseconds=int(micros))


async def execute_routed(client: Client, commands: Sequence[tuple[str | bytes, Command]]) -> list[Any]:
    """Commands each with the key that routes it: one batch per server (a standalone server gets them
    all in one), the batches side by side; the replies in input order. Raises as :func:`execute`
    does, once every batch is done."""
    if not commands:
        return []
    if not isinstance(client, RedisCluster):
        return await execute(client, commands[0][0], [command for _, command in commands])
    groups: dict[str, list[int]] = {}
    for i, (key, _) in enumerate(commands):
        node = client.get_node_from_key(key)  # type: ignore[arg-type]  # bytes work too
        groups.setdefault(node.name if node is not None else "", []).append(i)
    done = await asyncio.gather(
        *(execute(client, commands[at[0]][0], [commands[i][1] for i in at]) for at in groups.values()),
        return_exceptions=True,
    )
    replies: list[Any] = [None] * len(commands)
    for at, result in zip(groups.values(), done, strict=True):
        if isinstance(result, BaseException):
            raise result
        for i, reply in zip(at, result, strict=True):
            replies[i] = reply
    return replies


class Pipe:
    """Batches for the server of one key, one at a time in flight: :meth:`send` writes a batch and
    returns; :meth:`settle` reads its replies. Work done between the two overlaps the server's.

    A batch stays in flight until it is settled: when writing or reading it fails with
    :class:`~bus.errors.ConnectionFailed`, or a reply says the server cannot take it for now
    (``CLUSTERDOWN``, ``TRYAGAIN``, ``READONLY``, ``OOM``, ``MISCONF``, ``BUSY``), the next
    :meth:`settle` writes it again (so a caller that retries ``settle`` loses nothing; it may write
    entries twice, as any retried pipeline).

    The connection comes from the client's pool for each batch, or, with ``hold``, is kept from one
    batch to the next until :meth:`close` (a loop that talks to one server all the time saves the
    pool's bookkeeping, a tenth of a small batch's cost).

    The replies to a batch are waited for at most the connection's socket timeout, except on a held
    connection: a timer around every write and every batch's replies cost the coordinator's shard loops a
    quarter to a half of their latency (README, "The socket timeout and latency"). There TCP bounds the
    waits instead: keepalive probes and ``TCP_USER_TIMEOUT`` (:func:`bus.connection.tcp_options`) end a
    connection whose peer is gone or does not acknowledge what was sent within the socket timeout. A
    server that is up but does not answer (stopped, stalled) is waited for.
    """

    def __init__(self, client: Client, key: str | bytes, *, hold: bool = False) -> None:
        self.client = client
        self.key = key
        self.hold = hold
        self._batch: list[Command] | None = None
        self._transaction = False
        self._written = False
        self._held: tuple[Connection, Callable[[], Awaitable[None]]] | None = None
        self.first_reply_at = 0.0
        """When the first reply of the last batch read arrived (``time.perf_counter()``): the end of its
        first command, which commands written behind it in the same batch may outlast (a blocking read)."""

    @property
    def in_flight(self) -> bool:
        """A batch was sent and is not settled yet."""
        return self._batch is not None

    async def send(self, commands: Sequence[Command], *, transaction: bool = False) -> None:
        """Write a batch (in MULTI/EXEC with ``transaction``); the batch before must be settled."""
        self._check_settled()
        if commands:
            self._batch = [_MULTI, *commands, _EXEC] if transaction else list(commands)
            self._transaction = transaction
            with translated():
                await self._write(self._batch)

    async def settle(self) -> list[Any]:
        """The replies of the batch in flight (``[]`` when there is none), written again first when its
        connection failed; raises as :func:`execute` does."""
        batch = self._batch
        if batch is None:
            return []
        with translated():
            if not self._written:
                await self._write(batch)
            try:
                replies = await self._read(batch)
            except (*_REDIRECTED, rex.SlotNotCoveredError):
                await self._release()  # a connection to a node that no longer holds the key
                commands = batch[1:-1] if self._transaction else batch
                replies = await _redis_py_pipeline(self.client, commands, transaction=self._transaction)
                self._batch = None
                return replies
            transient = _transient(replies)
            if transient is not None:
                raise transient  # in flight still: the next settle writes the batch again
            self._batch = None
            if self._transaction:
                _raise_first_error(replies[1:-1])  # a command refused while queueing aborts the EXEC
                replies = replies[-1]
                if replies is None:
                    raise CommandFailed("the transaction was aborted (EXEC returned nil)")
            _raise_first_error(replies)
            return replies

    async def execute(self, commands: Sequence[Command], *, transaction: bool = False) -> list[Any]:
        """:meth:`send` and :meth:`settle` in one; a batch that fails is not kept in flight (the caller
        decides what to do again)."""
        self._check_settled()  # before the try: a batch in flight is not this call's to drop
        try:
            await self.send(commands, transaction=transaction)
            return await self.settle()
        finally:
            self._batch = None  # written or not: a write that failed (the server down) fails the batch too

    def _check_settled(self) -> None:
        if self._batch is not None:
            raise RuntimeError("the batch in flight must be settled before the next is sent")

    async def close(self) -> None:
        """Give a held connection back to the pool (a batch in flight is dropped)."""
        self._batch = None
        await self._release()

    async def _connection(self) -> Connection:
        if self._held is None:
            if isinstance(self.client, RedisCluster):
                if self.client in _REDISCOVER:
                    _REDISCOVER.discard(self.client)
                    try:
                        await self.client.nodes_manager.initialize()
                    except BaseException:
                        _REDISCOVER.add(self.client)
                        raise
                node = self.client.get_node_from_key(self.key)  # type: ignore[arg-type]  # bytes work too
                if node is None:
                    raise rex.SlotNotCoveredError(f"no node holds {self.key!r}")
                connection = node.acquire_connection()

                async def release() -> None:
                    node.release(connection)
            else:
                pool = self.client.connection_pool
                connection = await pool.get_connection()  # type: ignore[no-untyped-call]

                async def release() -> None:
                    await pool.release(connection)

            self._held = connection, release
        return self._held[0]

    async def _release(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            await held[1]()

    async def _lost(self, connection: Connection, exc: BaseException) -> None:
        """Close a connection whose batch failed (its replies can no longer be matched to commands); a
        cluster whose node did not answer is asked for its map of slots before the next batch."""
        await connection.disconnect()
        await self._release()
        if isinstance(self.client, RedisCluster) and isinstance(exc, _LOST):
            _REDISCOVER.add(self.client)

    async def _write(self, batch: list[Command]) -> None:
        connection = await self._connection()
        writer = getattr(connection, "_writer", None)
        try:
            if self.hold and writer is not None:
                # in place: redis-py bounds a write with asyncio.wait_for, a task per write in Python 3.11
                writer.write(pack(batch))
                await writer.drain()
            else:
                await connection.send_packed_command(pack(batch))
        except BaseException as exc:
            await self._lost(connection, exc)
            raise
        self._written = True

    async def _read(self, batch: list[Command]) -> list[Any]:
        """One reply per command. An error reply is kept as its exception (the parser has consumed it;
        the replies after it are still to be read); anything else that goes wrong closes the
        connection, since its replies can no longer be matched to commands."""
        assert self._held is not None
        connection = self._held[0]
        self._written = False
        # The connection's parser returns an error reply as its exception where the connection's own
        # read_response() raises it, after a timeout and health-check set-up per reply that costs as
        # much as the parsing; here one timeout (the connection's, if it has one) covers the batch.
        read = getattr(connection, "_parser", connection).read_response
        replies: list[Any] = []
        try:
            async with asyncio.timeout(None if self.hold else connection.socket_timeout):
                for _ in batch:
                    try:
                        replies.append(await read())
                    except rex.ResponseError as exc:
                        replies.append(exc)
                    if len(replies) == 1:
                        self.first_reply_at = time.perf_counter()
        except BaseException as exc:
            await self._lost(connection, exc)
            raise
        if not self.hold:
            await self._release()
        for reply in replies:
            if isinstance(reply, _REDIRECTED):
                raise reply
        return replies


async def _redis_py_pipeline(client: Client, commands: Sequence[Command], *, transaction: bool) -> list[Any]:
    pipe = client.pipeline(transaction=transaction)
    for command in commands:
        name, *args = command
        pipe.execute_command(name.decode(), *args)  # a cluster pipeline looks the name up as text
    return list(await pipe.execute())


def _transient(replies: Sequence[Any]) -> Exception | None:
    """The first error reply of a server that cannot take the batch for now
    (:func:`~bus.connection.refused_for_now`), the replies of an EXEC included: the batch is as unwritten
    as after a lost connection."""
    for reply in replies:
        if isinstance(reply, Exception) and refused_for_now(reply):
            return reply
        if isinstance(reply, list) and (inside := _transient(reply)) is not None:
            return inside
    return None


def _raise_first_error(replies: Sequence[Any]) -> None:
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply


class Script:
    """A Lua script run with EVALSHA. A server that does not know it (NOSCRIPT: restarted, failed over,
    or a cluster node it was never loaded on) gets SCRIPT LOAD and the EVALSHA again in one more round
    trip, on the same server."""

    def __init__(self, source: str) -> None:
        self.source = source.encode()
        self.sha = hashlib.sha1(self.source, usedforsecurity=False).hexdigest().encode()

    async def __call__(self, pipe: Pipe, keys: Sequence[bytes], args: Sequence[bytes]) -> Any:
        """The script's reply for ``keys`` and ``args``, run through ``pipe`` (whose key is in the slot
        of ``keys``)."""
        reply, _ = await self.run(pipe, keys, args)
        return reply

    async def load(self, pipe: Pipe) -> None:
        """Make sure the server ``pipe`` talks to knows the script (SCRIPT LOAD), so that a :meth:`run`
        with commands behind it gets their replies from then on."""
        await pipe.execute([(b"SCRIPT", b"LOAD", self.source)])

    async def run(
        self, pipe: Pipe, keys: Sequence[bytes], args: Sequence[bytes], then: Sequence[Command] = ()
    ) -> tuple[Any, list[Any] | None]:
        """The script's reply, and the replies of the commands ``then`` sent right behind it in the same
        write (the server runs them after the script). Those replies are None when the server did not
        know the script: the commands ran, but their replies were read with the failed batch."""
        command = (b"EVALSHA", self.sha, b"%d" % len(keys), *keys, *args)
        try:
            reply, *after = await pipe.execute([command, *then])
        except CommandFailed as exc:
            if not isinstance(exc.__cause__, rex.NoScriptError):
                raise
            _, reply = await pipe.execute([(b"SCRIPT", b"LOAD", self.source), command])
            return reply, None if then else []
        return reply, after
