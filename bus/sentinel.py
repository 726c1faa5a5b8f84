"""Sentinel-managed deployments: a client that finds the master through the Sentinels of the URL.

Each Sentinel is asked once, in the order of the URL (the next one is the retry), and when none gives
the master's address the error says what each one answered. :func:`bus.connection.connect` uses it for
``redis+sentinel://`` URLs.
"""

from __future__ import annotations

import os
from typing import Any, cast

import redis.asyncio
import redis.exceptions as rex
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel
from redis.backoff import NoBackoff

from bus.errors import ConfigError
from bus.settings import Settings, parse_sentinel_url

__all__ = ["sentinel_client"]


def sentinel_client(settings: Settings, options: dict[str, Any]) -> redis.asyncio.Redis:
    """A client of the master the ``redis+sentinel://`` URL of ``settings`` names, which follows its
    failovers; ``options`` are the connection's (the Sentinels get the timeouts and credentials only)."""
    try:
        target = parse_sentinel_url(settings.url)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    timeouts = {
        "socket_timeout": settings.socket_timeout,
        "socket_connect_timeout": settings.socket_connect_timeout,
    }
    # No retries per Sentinel: the next one in the list is the retry. With redis-py's default (ten, with
    # backoff) each dead Sentinel cost seconds, and a stalled one ten socket timeouts, before the next.
    sentinel_kwargs: dict[str, Any] = {**timeouts, "retry": Retry(NoBackoff(), 0)}
    if target.sentinel_password is not None:
        sentinel_kwargs["password"] = target.sentinel_password
    if target.sentinel_username is not None:
        sentinel_kwargs["username"] = target.sentinel_username
    if target.ssl:
        sentinel_kwargs["ssl"] = True
    sentinel = _Sentinel(list(target.hosts), sentinel_kwargs=sentinel_kwargs, **timeouts)  # type: ignore[no-untyped-call]
    master = {**options, "db": target.db, "username": target.username, "password": target.password}
    return cast(redis.asyncio.Redis, sentinel.master_for(target.master, **master, ssl=target.ssl))


class _Sentinel(Sentinel):
    """redis-py's Sentinel client, whose failure to find the master says which Sentinels were asked and
    what each answered (redis-py's own message is the repr of every Sentinel's connection pool)."""

    async def discover_master(self, service_name: str) -> tuple[str, int]:
        reasons: list[str] = []
        for i, sentinel in enumerate(self.sentinels):
            kwargs = sentinel.connection_pool.connection_kwargs
            where = f"{kwargs.get('host')}:{kwargs.get('port')}"
            try:
                masters: Any = await sentinel.sentinel_masters()
            except (rex.ConnectionError, rex.TimeoutError) as exc:
                reasons.append(f"{where} {_why(exc, kwargs.get('socket_timeout'))}")
                continue
            except rex.ResponseError as exc:  # a Redis server that is no Sentinel, listed by mistake
                reasons.append(f"{where} is not a Sentinel ({exc})")
                continue
            state = masters.get(service_name)
            if state is None:
                reasons.append(f"{where} does not monitor it")
            elif not self.check_master_state(state, service_name):
                reasons.append(f"{where} reports it down")
            else:
                self.sentinels[0], self.sentinels[i] = sentinel, self.sentinels[0]  # ask this one first
                return state["ip"], state["port"]
        raise MasterNotFoundError(
            f"no Sentinel gives the address of master {service_name!r}: {'; '.join(reasons)}"
        )


def _why(exc: Exception, timeout: float | None) -> str:
    """Why a Sentinel gave no answer, in a few words."""
    if isinstance(exc, rex.TimeoutError):
        return f"did not answer within {timeout:g}s" if timeout else "did not answer"
    if isinstance(exc, rex.AuthenticationError):
        return f"refused the credentials ({exc})"
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, OSError) and cause.errno and cause.errno > 0:
        return f"is unreachable ({os.strerror(cause.errno)})"
    return f"is unreachable ({exc})"
