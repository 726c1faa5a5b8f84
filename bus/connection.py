"""Connecting to Redis, and the one seam where redis-py's exceptions become :mod:`bus.errors`.

:func:`connect` returns redis-py's own asyncio client for the deployment the URL names: a plain client
for a standalone server or a unix socket, a Sentinel-managed client that follows failovers for
``redis+sentinel://`` (:mod:`bus.sentinel`), and a cluster client when the server says
``cluster_enabled:1`` (or when ``Settings.cluster`` forces it). Every other module runs its Redis calls
inside :func:`translated`. Nothing here knows of click: the commands' connection options are
:mod:`bus.cli_connection`'s.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final, TypeAlias
from urllib.parse import parse_qs, urlsplit

import redis.asyncio
import redis.exceptions as rex

from bus.errors import (
    BusError,
    CommandFailed,
    ConfigError,
    ConnectionFailed,
    CredentialsRefused,
    PermissionDenied,
)
from bus.sentinel import sentinel_client
from bus.settings import DEFAULT_SOCKET_TIMEOUT, Settings

__all__ = ["Client", "as_text", "check_block", "connect", "refused_for_now", "tcp_options", "translated"]

Client: TypeAlias = redis.asyncio.Redis | redis.asyncio.RedisCluster
"""Either asyncio client of redis-py; every module of the bus works with both."""

# Transient conditions: the server is away, loading, failing over or resharding.
_UNAVAILABLE = (
    rex.ConnectionError,
    rex.TimeoutError,
    rex.ClusterError,
    rex.ClusterDownError,
    rex.TryAgainError,
    rex.ReadOnlyError,
    rex.RedisClusterException,
    OSError,
)
_FOR_NOW: Final = (rex.ClusterDownError, rex.TryAgainError, rex.ReadOnlyError, rex.OutOfMemoryError)
_IN_TROUBLE: Final = ("MISCONF ", "BUSY ", "UNBLOCKED ")


def refused_for_now(exc: BaseException) -> bool:
    """Whether ``exc`` is a server's refusal of a command that it takes again, unchanged, later: a cluster
    that is down (``CLUSTERDOWN``) or resharding (``TRYAGAIN``), a master demoted to a replica
    (``READONLY``), or a server in trouble: out of memory (``OOM``: maxmemory reached, until memory is
    freed or the streams trimmed), unable to persist (``MISCONF``: a failing snapshot or AOF write) or
    running a script that does not end (``BUSY``); or a blocking read ended with an error by the server
    (``UNBLOCKED``: its master became a replica in a cluster failover, or ``CLIENT UNBLOCK ... ERROR``).
    A command so refused did nothing: a writer keeps it and sends it again, as after a lost connection,
    instead of dropping what it holds, and a reader reads again."""
    if isinstance(exc, _FOR_NOW):
        return True
    return type(exc) is rex.ResponseError and str(exc).startswith(_IN_TROUBLE)


@contextmanager
def translated() -> Iterator[None]:
    """Run Redis calls; their exceptions leave as :class:`~bus.errors.BusError` subclasses.

    Unreachable, timed-out, loading or failing-over servers give :class:`ConnectionFailed`; a refused
    command gives :class:`CommandFailed`. ``WatchError`` passes through unchanged: it is how an
    optimistic (WATCH/MULTI) transaction reports that a watched key changed, which its caller handles.
    """
    try:
        yield
    except rex.WatchError:
        raise
    except BusError:
        raise
    except rex.AuthenticationError as exc:  # a ConnectionError to redis-py, but no outage: say what to fix
        raise CredentialsRefused(
            f"Redis refused the credentials ({type(exc).__name__}): {exc}; check the user name and password "
            "of the URL"
        ) from exc
    except rex.CrossSlotTransactionError as exc:
        raise CommandFailed(f"keys of one transaction are in different cluster slots: {exc}") from exc
    except _UNAVAILABLE as exc:
        # bus.wire's own read timeout is a TimeoutError without a message
        detail = str(exc) or "no reply within the socket timeout"
        raise ConnectionFailed(f"Redis unavailable ({type(exc).__name__}): {detail}") from exc
    except rex.RedisError as exc:
        if refused_for_now(exc):
            raise ConnectionFailed(f"Redis unavailable ({type(exc).__name__}): {exc}") from exc
        raise _refused(exc) from exc
    except (AttributeError, TypeError) as exc:
        if not _closed_while_writing(exc):
            raise
        # exc's own text ("'NoneType' object has no attribute 'writelines'") is redis-py's inside
        raise ConnectionFailed("Redis unavailable (connection closed while writing)") from exc


def _refused(exc: rex.RedisError) -> BusError:
    """The error of a command the server refused."""
    said = f"({type(exc).__name__}): {exc}"
    if isinstance(exc, rex.NoPermissionError):
        return PermissionDenied(f"Redis refused the command {said}")
    if isinstance(exc, rex.InvalidResponse):  # the reply is no RESP at all: another kind of server
        return CommandFailed(
            f"the server did not answer as Redis does {said}: check that the URL's host and port are a "
            "Redis server's"
        )
    if isinstance(exc, rex.AskError):  # MovedError too: only a client that is not a cluster client sees one
        return CommandFailed(
            f"the server is a Redis Cluster node: it sent a key to another node {said}; use the cluster "
            "client (leave out --no-cluster)"
        )
    return CommandFailed(f"Redis refused the command {said}")


_CONNECTION_MODULE = os.path.join("redis", "asyncio", "connection.py")


def _closed_while_writing(exc: BaseException) -> bool:
    """Whether ``exc`` is redis-py's asyncio connection written to after it was closed under it.

    redis-py 8.1 raises ``AttributeError`` (its writer is gone: a cluster client closes a lost node's
    connections while other tasks use them) or, on Python 3.12, ``TypeError`` (the transport is torn
    down) instead of ``ConnectionError`` (redis-py issue 4287). Only an error raised in that module, or
    in the asyncio stream or transport it was writing to, is taken for it; any other is a bug and stays one.
    """
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    innermost = frames[-3:]
    raised_in = innermost[-1] if innermost else ""
    return any(name.endswith(_CONNECTION_MODULE) for name in innermost) and (
        raised_in.endswith(_CONNECTION_MODULE) or f"{os.sep}asyncio{os.sep}" in raised_in
    )


def as_text(value: bytes | str) -> str:
    """A value of a Redis reply as text: the clients here return bytes, a client made with
    ``decode_responses`` returns str."""
    return value.decode() if isinstance(value, bytes) else value


async def connect(settings: Settings) -> Client:
    """A connected client for ``settings`` (the server has answered once); errors are translated."""
    with translated():
        if settings.is_sentinel:
            return await _checked(sentinel_client(settings, _options(settings)))
        if settings.scheme == "unix":
            return await _checked(redis.asyncio.Redis.from_url(settings.url, **_options(settings)))
        single = redis.asyncio.Redis.from_url(settings.url, **_options(settings))
        cluster = settings.cluster
        if cluster is None:
            try:
                cluster = await _cluster_enabled(single)
            except BaseException:
                await single.aclose()
                raise
        if not cluster:
            return await _checked(single)
        await single.aclose()
        return await _cluster_client(settings)


async def _checked(client: redis.asyncio.Redis) -> redis.asyncio.Redis:
    try:
        await client.ping()
    except BaseException:
        await client.aclose()
        raise
    return client


async def _cluster_enabled(client: redis.asyncio.Redis) -> bool:
    try:
        info = await client.info("cluster")
    except rex.ResponseError as exc:
        # SELECT of a database other than 0 fails on a cluster node; INFO refused (ACL) means standalone
        return "cluster mode" in str(exc)
    return str(info.get("cluster_enabled", "0")) == "1"


async def _cluster_client(settings: Settings) -> redis.asyncio.RedisCluster:
    db = _db_of(settings.url)
    if db:
        raise ConfigError(f"{settings.display_url()}: a Redis Cluster has only database 0, not {db}")
    options = _options(settings)
    options.pop("db", None)
    client = redis.asyncio.RedisCluster.from_url(settings.url, **options)
    try:
        await client.initialize()
    except rex.RedisClusterException as exc:
        await client.aclose()
        if settings.cluster and "not enabled" in str(exc).lower():
            raise ConfigError(
                f"{settings.display_url()} is not a cluster node (a cluster client was asked for: "
                "--cluster, or Settings(cluster=True))"
            ) from exc
        raise
    except BaseException:
        await client.aclose()
        raise
    return client


def check_block(client: Client, block_ms: int) -> None:
    """Refuse a blocking read of ``block_ms`` that ``client``'s socket timeout would cut (a
    :class:`ConfigError`): the wait of a blocked read counts against the timeout."""
    if isinstance(client, redis.asyncio.RedisCluster):
        timeout = client.connection_kwargs.get("socket_timeout")
    else:
        timeout = client.connection_pool.connection_kwargs.get("socket_timeout")
    if isinstance(timeout, int | float) and block_ms >= timeout * 1000:
        raise ConfigError(f"block_ms {block_ms} is not below the client's socket timeout ({timeout:g}s)")


def _db_of(url: str) -> int:
    """The database ``url`` names, read as redis-py reads it: its query's first ``db``, which it takes over
    its path's, else its path's."""
    parts = urlsplit(url)
    given = parse_qs(parts.query).get("db")
    try:
        return int(given[0] if given else parts.path.strip("/"))
    except ValueError:
        return 0


def tcp_options(socket_timeout: float | None) -> dict[int, int]:
    """TCP keepalive, and ``TCP_USER_TIMEOUT``, from the socket timeout: how a connection whose waits are
    not timed (:class:`bus.wire.Pipe` with ``hold``) still ends when its peer is gone (unanswered probes
    after a third of the timeout idle) or stops acknowledging what was sent (within the timeout).
    Options the platform lacks are left out."""
    # Linux refuses (EINVAL) keepalive times over 32767 s and a user timeout over INT_MAX ms.
    bound = min(socket_timeout or DEFAULT_SOCKET_TIMEOUT, 32767.0)
    wanted = {
        "TCP_KEEPIDLE": max(1, int(bound / 3)),
        "TCP_KEEPINTVL": max(1, int(bound / 10)),
        "TCP_KEEPCNT": 3,
        "TCP_USER_TIMEOUT": int(bound * 1000),
    }
    return {getattr(socket, name): value for name, value in wanted.items() if hasattr(socket, name)}


_UNBOUNDED: Final = 2**31 - 1
"""A pool's size when the settings set none."""

try:
    from redis.maint_notifications import MaintNotificationsConfig
except ImportError:  # a redis-py without them: its pool checks every connection it hands out
    _NO_MAINTENANCE: MaintNotificationsConfig | None = None
else:
    # With maintenance notifications on ("auto", and RESP3: redis-py 8's default), the asyncio pool hands
    # out a connection without looking whether the server closed it (redis-py issue 4252): after a
    # restart, each one the pool held failed once, seconds later, whichever task took it (a coordinator's
    # shard loop then lost its lease and said again that the server was away). Off, the pool reconnects a
    # closed one first. They serve Redis Enterprise's planned failovers, which these clients ride out
    # like any outage.
    _NO_MAINTENANCE = MaintNotificationsConfig(enabled=False)


def _options(settings: Settings) -> dict[str, Any]:
    options: dict[str, Any] = {
        "decode_responses": False,
        "socket_timeout": settings.socket_timeout,
        "socket_connect_timeout": settings.socket_connect_timeout,
        "health_check_interval": settings.health_check_interval,
    }
    if settings.scheme != "unix":  # a Unix socket has no TCP options (and redis-py refuses them there)
        options["socket_keepalive"] = True
        options["socket_keepalive_options"] = tcp_options(settings.socket_timeout)
    # redis-py caps a pool at 100 connections unless told otherwise, and a coordinator holds one per shard
    options["max_connections"] = settings.max_connections or _UNBOUNDED
    if _NO_MAINTENANCE is not None:
        options["maint_notifications_config"] = _NO_MAINTENANCE
    return options
