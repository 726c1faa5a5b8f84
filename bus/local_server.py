"""The local Redis behind commands run without ``--redis-url``: one server per data directory.

A command that is given no URL joins the server kept in its data directory (``./.subagent-bus``), and
starts it if none runs there, on the port it had before when that is free. The server is daemonised, not a
child, so that adapters, coordinators and ``status`` in other terminals share it and it outlives the
command that started it; its data and append-only file stay in the directory. ``server.json`` there says
how to reach it, and a lock file makes concurrent commands start one server, not two. The server processes
of tests, which end with their owner, are :mod:`bus.embedded`'s.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import orjson
import redis

from bus.embedded import RedisProcess, free_port, log_tail, pid_alive, port_free, wait_for_ping
from bus.errors import EmbeddedRedisError

__all__ = ["ensure_local_server", "stop_local_server"]

_STATE_FILE = "server.json"
_SERVER_NAMES: Final = ("redis-server", "valkey-server")
"""What a server process is called (its executable's name, which a server keeps while it renames itself)."""


def ensure_local_server(directory: Path) -> str:
    """The URL of the local server kept in ``directory``, starting it (daemonised) if it is not running.

    The server keeps its data and append-only file in ``directory`` and outlives the command that
    started it, so other processes (adapters, coordinators, ``status``) join it through the same URL.
    """
    directory = Path(directory).resolve()
    url = _running_url(directory)
    if url:
        return url
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with _exclusive(directory / "start.lock"):
            return _running_url(directory) or _start_local_server(directory)
    except OSError as exc:
        raise EmbeddedRedisError(f"cannot keep the local Redis in {directory}: {exc}") from None


def _start_local_server(directory: Path) -> str:
    _refuse_a_second_server(directory)
    port = _previous_port(directory) or free_port()
    args = RedisProcess(directory, port=port, appendfsync="everysec").argv()
    pidfile = directory / "server.pid"
    pidfile.unlink(missing_ok=True)  # a dead server's: a pid file is then always the new server's
    args += ["--daemonize", "yes", "--pidfile", str(pidfile)]
    url = f"redis://127.0.0.1:{port}/0"
    # Written before the server starts: a command interrupted from then on (Ctrl-C), or one that gave up
    # while the server loaded a large append-only file, leaves it reachable by the next (one that did not
    # start leaves a URL that answers nothing, which the next command starts again).
    state = directory / _STATE_FILE
    partial = state.with_suffix(".tmp")  # renamed into place: a reader never sees half of it
    partial.write_bytes(orjson.dumps({"url": url, "port": port}))
    partial.replace(state)
    # stdin too: a command started with it closed would leave fd 0 free for the server's socket, which
    # daemonizing then points at /dev/null
    started = subprocess.run(args, check=False, cwd=directory, capture_output=True, stdin=subprocess.DEVNULL)
    if started.returncode != 0:
        said = b" ".join((started.stdout + started.stderr).split()).decode(errors="replace")
        raise EmbeddedRedisError(
            f"the local Redis in {directory} did not start (exit status {started.returncode}): "
            f"{said[-300:] or log_tail(directory / 'server.log')}"
        )
    wait_for_ping(url, 15.0, None, directory / "server.log", pidfile)
    return url


def _previous_port(directory: Path) -> int | None:
    """The port of the directory's last server, when it is free: the commands that follow a server
    (``tail``, adapters, coordinators, ``listen``) reconnect to the one started after ``down``."""
    port = _recorded(directory, "port")
    return port if type(port) is int and 0 < port < 65536 and port_free(port) else None


def _refuse_a_second_server(directory: Path) -> None:
    """Two servers on one data directory would both write its append-only file: refuse to start one
    while the server of the pid file runs unreachable through ``server.json`` (damaged or removed)."""
    pid = _server_pid(directory)
    if pid is not None:
        raise EmbeddedRedisError(
            f"a local Redis (pid {pid}) still runs in {directory}, but {_STATE_FILE} there does not say "
            "how to reach it; `subagent-bus down` stops it"
        )


def _server_pid(directory: Path) -> int | None:
    """The pid in the server's pid file, if that process is still this directory's server.

    A server works in its data directory, and is a ``redis-server`` or ``valkey-server``: another process
    is not it, even when the pid file names it (a directory copied with its pid file names the original's
    server; a pid of a server killed with -9 may have been given to any process since, one started in
    that directory too).
    """
    try:
        pid = int((directory / "server.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    if not Path("/proc/self/cwd").exists():
        return pid if pid_alive(pid) else None  # no /proc to ask: trust the pid
    try:
        here = Path(os.readlink(f"/proc/{pid}/cwd")) == directory
        server = Path(f"/proc/{pid}/comm").read_text().strip() in _SERVER_NAMES
    except OSError:  # gone, or another user's process
        return None
    return pid if here and server else None


def stop_local_server(directory: Path, timeout: float = 10.0) -> bool:
    """Shut the local server in ``directory`` down and wait until its process has exited (its data
    stays); False if none was running."""
    directory = Path(directory).resolve()
    try:
        url = _running_url(directory)
    except EmbeddedRedisError:  # stalled: SIGTERM is what it will act on when it goes on
        url = None
    if url is None:
        pid = _server_pid(directory)
        if pid is None:
            return False
        with contextlib.suppress(ProcessLookupError):  # it may have exited in between
            os.kill(pid, signal.SIGTERM)  # a server shuts down on SIGTERM as on SHUTDOWN
    else:
        pid = _shut_down(url)
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            raise EmbeddedRedisError(f"the local server (pid {pid}) did not exit within {timeout:.0f}s")
        time.sleep(0.02)  # a daemonised server is not our child: nothing to wait() on
    return True


def _shut_down(url: str) -> int:
    """Ask the server at ``url`` to shut down; its pid."""
    client = redis.Redis.from_url(url)
    try:
        pid = int(client.info("server")["process_id"])
        with contextlib.suppress(redis.ConnectionError):  # the server closing the connection: done
            client.shutdown(nosave=True)
    except redis.RedisError as exc:
        raise EmbeddedRedisError(f"cannot stop the local server at {url}: {exc}") from None
    finally:
        client.close()
    return pid


def _recorded(directory: Path, field: str) -> object:
    """A field of the directory's ``server.json``; None when the file or the field is missing or damaged."""
    try:
        return orjson.loads((directory / _STATE_FILE).read_bytes())[field]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _running_url(directory: Path) -> str | None:
    url = _recorded(directory, "url")
    if not (isinstance(url, str) and _written(url)):
        return None  # a damaged file: as if none were recorded (the pid file still tells of a server)
    # Not ours by the pid file (gone, or never written): whatever holds the port answers at once if it is
    # a server, and a program that takes the connection and says nothing costs half a second, not five.
    ours = _server_pid(directory) is not None
    timeout = _PROBE_TIMEOUT_S if ours else _QUICK_PROBE_S
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=timeout)
    try:
        info = client.info("server")
        # The port may have been taken by some other server since: only reuse our own.
        same_dir = _same_directory(str(client.config_get("dir").get("dir", "")), directory)
        return url if same_dir and info else None
    except redis.TimeoutError:
        if not ours and _server_pid(directory) is None:
            return None  # not our server, which is gone: the port is some other program's now
        # Our server, silent: taking it for gone would start a second server on the same data.
        raise EmbeddedRedisError(
            f"the local Redis at {url} ({directory}) took the connection but did not answer within "
            f"{timeout:g}s: stalled or overloaded; try again, or stop it with `subagent-bus down`"
        ) from None
    except (redis.RedisError, OSError):
        return None
    finally:
        client.close()


def _same_directory(reported: str, directory: Path) -> bool:
    """Whether the server's ``CONFIG GET dir`` names ``directory``; redis-py decodes the reply with
    ``errors="replace"``, so a path that is not UTF-8 is compared as it decodes it."""
    return (
        reported == os.fsencode(directory).decode(errors="replace") or Path(reported).resolve() == directory
    )


_PROBE_TIMEOUT_S = 5.0
_QUICK_PROBE_S = 0.5
_URL: Final = re.compile(r"redis://127\.0\.0\.1:(\d{1,5})/0")


def _written(url: str) -> bool:
    """Whether ``url`` is one :func:`_start_local_server` writes (any other, a hand-edited or damaged
    file's, could name an option or a port that redis-py fails on)."""
    match = _URL.fullmatch(url)
    return match is not None and 0 < int(match[1]) < 65536


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
