"""How the commands reach Redis: the shared connection options, and the local server they default to.

:func:`redis_options` gives a click command ``--redis-url`` and the other connection options, and hands
it one :class:`~bus.settings.Settings`; without a URL that is the local server of
:mod:`bus.local_server`, which ``subagent-bus down`` stops. :func:`run_command` is where a command's
:class:`~bus.errors.BusError` becomes click's one-line error. The library side, which knows nothing of
click, is :mod:`bus.connection`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Final, ParamSpec, TypeVar

import click

from bus.errors import BusError, ConfigError, PermissionDenied
from bus.local_server import ensure_local_server, stop_local_server
from bus.logs import JsonFormatter
from bus.params import EnvOption, FiniteFloatRange
from bus.settings import DEFAULT_NAMESPACE, DEFAULT_SOCKET_TIMEOUT, MAX_SHARDS, MIN_SOCKET_TIMEOUT, Settings

__all__ = [
    "NAMESPACE_ENV",
    "URL_ENV",
    "default_url",
    "down",
    "redis_options",
    "run_command",
    "settings_from_options",
]

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_DATA_DIR = Path(".subagent-bus")
URL_ENV: Final = "SUBAGENT_BUS_REDIS_URL"
"""The environment variable of ``--redis-url`` (also set for the processes the bus starts)."""
NAMESPACE_ENV: Final = "SUBAGENT_BUS_NAMESPACE"


def default_url(data_dir: Path | None = None) -> str:
    """The URL of the embedded local server in ``data_dir`` (``.subagent-bus``), started if needed.

    Prints nothing; a command that uses it tells the user (``using local Redis at URL``).
    """
    return ensure_local_server(data_dir or DEFAULT_DATA_DIR)


def settings_from_options(
    redis_url: str | None,
    namespace: str,
    cluster: bool | None,
    shards: int | None = None,
    socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
) -> Settings:
    """Settings from the shared command-line options; no URL starts (or joins) the embedded server."""
    if redis_url is None:
        redis_url = default_url()
        _tell(f"using local Redis at {redis_url} (`subagent-bus down` stops it)")
    return Settings.from_url(
        redis_url, namespace=namespace, cluster=cluster, shards=shards, socket_timeout=socket_timeout
    )


def _tell(message: str) -> None:
    """A line for the user on stderr; a JSON log line when the command logs JSON (``--log-json``), whose
    logging is not set up yet: the connection options are resolved before the command runs."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.params.get("log_json"):
        fields = {
            "name": "subagent_bus.connection",
            "msg": message,
            "levelname": "INFO",
            "levelno": logging.INFO,
        }
        # an adapter's lines carry its agent's ids: this one too
        fields |= {name: ctx.params[name] for name in ("agent_id", "group_id") if ctx.params.get(name)}
        message = JsonFormatter().format(logging.makeLogRecord(fields))
    click.echo(message, err=True)


@click.command()
def down() -> None:
    """Stop the local Redis that commands run without --redis-url started in ./.subagent-bus.

    That server outlives the command that started it, so that adapters, coordinators and `status` in
    other terminals share it; its data stays in ./.subagent-bus and the next such command starts it
    again.
    """
    try:
        stopped = stop_local_server(DEFAULT_DATA_DIR)
    except BusError as exc:
        raise click.ClickException(str(exc)) from None
    if stopped:
        click.echo(f"stopped the local Redis in {DEFAULT_DATA_DIR}/ (its data stays)", err=True)
    else:
        click.echo(f"no local Redis running in {DEFAULT_DATA_DIR}/", err=True)


def redis_options(command: Callable[P, R]) -> Callable[..., R]:
    """Add ``--redis-url``, ``--namespace``, ``--shards``, ``--cluster/--no-cluster`` and
    ``--socket-timeout`` to a click command.

    The command receives one ``settings: Settings`` keyword instead of the five options. A bad value
    is a usage error (exit code 2).
    """

    @click.option(
        "--redis-url",
        envvar=URL_ENV,
        cls=EnvOption,
        default=None,
        metavar="URL",
        help="redis://, rediss://, unix://, redis+sentinel://h1:p1,h2:p2/master, or any cluster node. "
        "Default: a local server kept in ./.subagent-bus.",
    )
    @click.option(
        "--namespace",
        envvar=NAMESPACE_ENV,
        cls=EnvOption,
        default=DEFAULT_NAMESPACE,
        show_default=True,
        help="Key prefix of this bus.",
    )
    @click.option(
        "--shards",
        envvar="SUBAGENT_BUS_SHARDS",
        cls=EnvOption,
        type=click.IntRange(1, MAX_SHARDS),
        default=None,
        metavar="N",
        help="Shards of the namespace. The first command that writes to a namespace (a coordinator, an "
        "adapter, a launcher) creates it with N (default 8); then the count is fixed, and a different N is "
        "refused, by every command.",
    )
    @click.option(
        "--cluster/--no-cluster",
        default=None,
        help="Force the Redis Cluster client on or off. Default: ask the server.",
    )
    @click.option(
        "--socket-timeout",
        envvar="SUBAGENT_BUS_SOCKET_TIMEOUT",
        cls=EnvOption,
        type=FiniteFloatRange(min=MIN_SOCKET_TIMEOUT),
        default=DEFAULT_SOCKET_TIMEOUT,
        show_default=True,
        metavar="SECONDS",
        help="Give up on a Redis reply after SECONDS: a server that stops answering is an error, not a "
        "hang. Blocking reads wait at most 1 s, so an idle stream never reaches it.",
    )
    @functools.wraps(command)
    def wrapper(
        *args: Any,
        redis_url: str | None,
        namespace: str,
        shards: int | None,
        cluster: bool | None,
        socket_timeout: float,
        **kwargs: Any,
    ) -> R:
        ctx = click.get_current_context(silent=True)
        if ctx is not None and ctx.invoked_subcommand is not None:
            # A group running one of its subcommands does not use its own connection options; resolving
            # them would start the embedded server for nothing (`findings add --help`).
            return None  # type: ignore[return-value]
        try:
            settings = settings_from_options(redis_url, namespace, cluster, shards, socket_timeout)
        except ConfigError as exc:
            raise click.UsageError(str(exc)) from None
        except BusError as exc:
            raise click.ClickException(str(exc)) from None
        return command(*args, settings=settings, **kwargs)  # type: ignore[arg-type]

    return wrapper


T = TypeVar("T")


def run_command(coro: Coroutine[Any, Any, T], *, also: tuple[type[Exception], ...] = ()) -> T:
    """Run a command's work; a :class:`BusError` (or one of ``also``) is the command's one-line error.

    The seam where a CLI command turns the bus's errors into click's (exit code 1, no traceback).
    """
    caught: tuple[type[Exception], ...] = (BusError, *also)
    try:
        # As asyncio.run does: Ctrl-C is caught only where it would raise KeyboardInterrupt (not where
        # it is ignored, as in a background job) and only in the main thread, where signals arrive.
        catch = signal.getsignal(signal.SIGINT) is signal.default_int_handler
        catch = catch and threading.current_thread() is threading.main_thread()
        return asyncio.run(_interruptible(coro) if catch else coro)
    except PermissionDenied as exc:  # the URL names a user of a role (`acl`) that may not do this
        raise click.ClickException(f"{exc} (`subagent-bus acl --help` says what each role may)") from None
    except caught as exc:
        raise click.ClickException(str(exc)) from None
    except _Interrupted:
        raise KeyboardInterrupt from None


_RECANCEL_S = 0.1


class _Interrupted(Exception):
    """Ctrl-C ended a command's work."""


async def _interruptible(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro``; Ctrl-C cancels it, and cancels it again until it ends.

    ``asyncio.run`` cancels once, and on Python 3.11 one cancellation can be lost: redis-py sends with
    ``asyncio.wait_for``, which returns the send's result when the send finishes as it is cancelled,
    and the command would wait out a socket timeout.
    """
    loop = asyncio.get_running_loop()
    task = loop.create_task(coro)
    pressed = asyncio.Event()
    loop.add_signal_handler(signal.SIGINT, pressed.set)
    waiting = loop.create_task(pressed.wait())
    try:
        await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
        while not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=_RECANCEL_S)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        waiting.cancel()
    if pressed.is_set():
        raise _Interrupted
    return task.result()
