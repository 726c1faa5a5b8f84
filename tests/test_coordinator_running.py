"""A running coordinator and its surroundings: stopping it, a server that lost the namespace.

The first SIGTERM or Ctrl-C stops a coordinator gracefully, a second one at once.

A graceful stop applies what is pending on the process's shards and releases its leases, which waits for
the server; with the server stalled a supervisor's second signal must still end the process (commits are
atomic, so stopping at once is a crash, which loses nothing).
"""

from __future__ import annotations

import asyncio
import gc
import signal
import subprocess
import warnings
from pathlib import Path

import pytest
import redis
from adapter_kit import CLI, exited, logged, start, wait_until
from click.testing import CliRunner
from workers.kit import connected, progresses

from bus.connection import connect
from bus.embedded import RedisProcess
from bus.keys import Keys, open_namespace
from bus.publisher import Publisher
from bus.settings import Settings
from coordinator import cli
from coordinator.lease import lease_key


def _from_a_terminal() -> None:
    """A process started as from a terminal: a suite run under ``nohup`` would hand it a SIGHUP it is to
    keep ignoring."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _under_nohup() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # what `nohup` does before it runs its command


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda sig: sig.name)
async def test_a_second_signal_stops_a_coordinator_waiting_for_a_stalled_server(
    fresh_redis: RedisProcess, tmp_path: Path, sig: signal.Signals
) -> None:
    log = tmp_path / "coordinator.log"
    args = ["coordinator", "--name", "stalled", "--shards", "2"]
    coordinator = start(args, fresh_redis.url, log, preexec_fn=_from_a_terminal)
    assert fresh_redis.process is not None
    try:
        await wait_until(logged(log, "shard 1 acquired by stalled"), 30, "the coordinator to take its shards")
        fresh_redis.process.send_signal(signal.SIGSTOP)
        coordinator.send_signal(sig)
        await wait_until(
            logged(log, f"{sig.name}: stopping after the entries pending"), 20, "the first signal"
        )
        assert coordinator.poll() is None  # the graceful stop waits for the server
        coordinator.send_signal(sig)
        assert await exited(coordinator, 20) == 128 + sig
    finally:
        fresh_redis.process.send_signal(signal.SIGCONT)
    assert f"{sig.name} again: stopping at once" in log.read_text()


async def test_sighup_stops_a_coordinator_gracefully_unless_it_runs_under_nohup(
    redis_url: str, tmp_path: Path
) -> None:
    """Its terminal closed, a coordinator stops as on SIGTERM: it releases its leases, so that another
    coordinator need not wait out their TTL (a minute here) for its shards. One started by ``nohup``
    outlives its terminal."""
    admin = redis.Redis.from_url(redis_url)
    leases = [lease_key(Keys("sbus", 2), shard) for shard in range(2)]
    args = ["--shards", "2", "--lease-ttl", "60000"]
    try:
        log = tmp_path / "kept.log"
        kept = start(["coordinator", "--name", "kept", *args], redis_url, log, preexec_fn=_under_nohup)
        await wait_until(logged(log, "shard 1 acquired by kept"), 30, "the coordinator to take its shards")
        kept.send_signal(signal.SIGHUP)  # ignored, as nohup asked: the SIGTERM after it is the first stop
        kept.send_signal(signal.SIGTERM)
        assert await exited(kept, 30) == 0, log.read_text()
        assert "SIGTERM: stopping after the entries pending" in log.read_text()
        assert "SIGHUP" not in log.read_text()

        log = tmp_path / "hup.log"
        hup = start(["coordinator", "--name", "hup", *args], redis_url, log, preexec_fn=_from_a_terminal)
        await wait_until(logged(log, "shard 1 acquired by hup"), 30, "the coordinator to take its shards")
        hup.send_signal(signal.SIGHUP)
        assert await exited(hup, 30) == 0, log.read_text()
        holders = [admin.get(key) for key in leases]
        assert holders == [None, None]  # released, a minute before they would expire
        text = log.read_text()
        assert "SIGHUP: stopping after the entries pending on this process's shards" in text
        assert "coordinator hup stopped after applying" in text
    finally:
        admin.close()


async def test_a_running_coordinator_writes_back_the_namespace_a_server_lost(
    redis_url: str, tmp_path: Path
) -> None:
    """A server restarted without its data under running coordinators: the namespace's shard count is
    written back, so the next command does not create the namespace anew with another count."""
    log = tmp_path / "coordinator.log"
    coordinator = start(["coordinator", "--name", "keeper", "--shards", "2"], redis_url, log)
    admin = redis.Redis.from_url(redis_url)
    meta = Keys("sbus", 2).meta
    try:
        await wait_until(logged(log, "shard 1 acquired by keeper"), 30, "the coordinator to take its shards")
        admin.delete(meta)

        async def written_back() -> bool:
            return admin.get(meta) == b"2"

        await wait_until(written_back, 30, "the shard count to be written back")
        await wait_until(logged(log, f"{meta} was missing"), 10, "the coordinator to say so")
        admin.set(meta, "3")  # a command created it anew, between the loss and the write-back
        await wait_until(logged(log, f"{meta} says '3' shards while this coordinator runs 2"), 30, "an error")
    finally:
        coordinator.terminate()
        admin.close()
    assert await exited(coordinator, 30) == 0


async def test_a_shard_count_the_server_s_maxclients_cannot_take_is_refused(tmp_path: Path) -> None:
    """Two connections per shard: 12 000 shards held every client of a default server out."""
    server = RedisProcess(tmp_path / "redis", config={"maxclients": "100"})
    server.start()
    argv = [CLI, "coordinator", "--burst", "--redis-url", server.url, "--namespace", "many", "--shards"]

    def run(shards: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*argv, str(shards)], capture_output=True, text=True, timeout=60, check=False)

    running = []
    try:
        done = run(60)
        assert done.returncode == 1
        assert "a coordinator of 60 shards may hold 120 connections (two per shard), more than the 100" in (
            done.stderr
        )
        # refused before the namespace was created: it may still be made with fewer, and a second
        # coordinator, which shares the shards, is not refused for the first one's connections
        for name in ("one", "two"):
            log = tmp_path / f"{name}.log"
            running.append(
                start(
                    ["coordinator", "--namespace", "many", "--shards", "30", "--name", name], server.url, log
                )
            )
            await wait_until(logged(log, f"acquired by {name}"), 60, f"coordinator {name} to take shards")
        mismatch = run(60)
        assert mismatch.returncode == 1 and "namespace 'many' has 30 shards, not 60" in mismatch.stderr
    finally:
        for process in running:
            process.terminate()
            process.wait(30)
        server.stop()


def test_a_coordinator_refused_at_start_closes_its_connection(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A namespace of another shard count (or too many shards for the server) ends the command before
    it coordinates anything: its connection is closed all the same, not left to the garbage collector."""

    async def made() -> None:
        client = await connect(Settings.from_url(redis_url))
        await open_namespace(client, "fixed", 2)
        await client.aclose()

    asyncio.run(made())
    monkeypatch.setattr(cli, "setup_logging", lambda **_: None)  # the test process's logging and gc stay
    monkeypatch.setattr(cli, "tune_gc", lambda: None)
    args = ["--redis-url", redis_url, "--namespace", "fixed", "--shards", "4", "--burst"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        refused = CliRunner().invoke(cli.run_coordinator, args)
        output, code = refused.output, refused.exit_code
        del refused  # its traceback holds the command's frames, and so its client
        gc.collect()
    assert code == 1 and "namespace 'fixed' has 2 shards, not 4" in output
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_a_replica_s_url_is_refused_at_start(fresh_redis: RedisProcess) -> None:
    """Every write of a coordinator on a replica is refused (READONLY), which a running coordinator waits
    out as a failover under way: given a replica's URL, it waited for ever. It is refused at the start,
    whether the namespace exists there or not."""
    argv = [CLI, "coordinator", "--burst", "--redis-url", fresh_redis.url, "--shards", "2"]
    admin = redis.Redis.from_url(fresh_redis.url)
    try:
        for namespace in ("made", "missing"):
            if namespace == "made":
                subprocess.run([*argv, "--namespace", namespace], capture_output=True, timeout=60, check=True)
            admin.replicaof("127.0.0.1", 1)  # a replica of a master that does not answer: read-only
            refused = subprocess.run(
                [*argv, "--namespace", namespace], capture_output=True, text=True, timeout=60, check=False
            )
            admin.replicaof("NO", "ONE")
            assert refused.returncode == 1, (namespace, refused.stderr)
            assert "Error: the server is a read-only replica (of 127.0.0.1:1): give the master's URL" in (
                refused.stderr
            )
    finally:
        admin.close()


async def test_a_coordinator_waits_out_a_server_out_of_memory(
    fresh_redis: RedisProcess, tmp_path: Path
) -> None:
    """OOM (maxmemory reached) refuses its ticks, leases and commits until memory is freed: the
    coordinator retries as for an outage, and goes on once the server takes writes again."""
    url, group = fresh_redis.url, "oom-group"
    log = tmp_path / "coordinator.log"
    coordinator = start(["coordinator", "--shards", "1"], url, log)
    admin = redis.Redis.from_url(url)
    try:
        await wait_until(logged(log, "shard 0 acquired"), 30, "the coordinator to take its shard")
        admin.config_set("maxmemory", 1)
        await wait_until(logged(log, "OutOfMemoryError"), 30, "the coordinator to meet the refusal")
        admin.config_set("maxmemory", 0)
        client = await connect(Settings.from_url(url))
        try:
            await Publisher(client, await open_namespace(client, "sbus", 1)).publish_many(
                progresses(3, group_id=group)
            )
        finally:
            await client.aclose()

        async def applied() -> bool:
            args = [CLI, "status", "--json", "--group", group, "--redis-url", url]
            shown = await asyncio.to_thread(subprocess.run, args, capture_output=True, text=True, check=False)
            return '"applied": 3' in shown.stdout

        await wait_until(applied, 60, "the coordinator to apply what came after")
        assert coordinator.poll() is None, log.read_text()
    finally:
        admin.config_set("maxmemory", 0)
        admin.close()
        coordinator.terminate()
    assert await exited(coordinator, 30) == 0, log.read_text()


async def test_a_blocking_read_the_server_ends_is_read_again_with_the_lease_kept(
    redis_url: str, tmp_path: Path
) -> None:
    """A cluster failover ends the blocking reads of a master that became a replica with UNBLOCKED: the
    coordinator took that for an outage, gave its shard up and took it again only once its lease had
    expired (a minute here), applying nothing meanwhile."""
    admin = redis.Redis.from_url(redis_url)
    log = tmp_path / "coordinator.log"
    coordinator = start(
        ["coordinator", "--name", "reader", "--shards", "1", "--lease-ttl", "60000"], redis_url, log
    )
    try:
        await wait_until(logged(log, "shard 0 acquired by reader"), 30, "the coordinator to take its shard")

        def blocked() -> list[int]:
            clients = admin.client_list()
            return [int(c["id"]) for c in clients if c["cmd"] == "xreadgroup" and "b" in c["flags"]]

        async def reading() -> bool:
            return bool(blocked())

        async with connected(redis_url) as client:
            keys = await open_namespace(client, "sbus")
            for group in ("group-1", "group-2"):  # the second's read is the one sent behind a commit
                await wait_until(reading, 30, "the coordinator's blocking read")
                for client_id in blocked():
                    admin.client_unblock(client_id, error=True)
                await Publisher(client, keys).publish_many(progresses(1, group_id=group))

                async def applied() -> bool:
                    return bool(await client.sismember(keys.groups(0), group))  # noqa: B023

                await wait_until(applied, 20, "the signal to be applied, the lease not waited out")
        said = log.read_text()
        assert "UNBLOCKED" in said and "reading again" in said
        assert "lost committed writes" not in said  # the state reloaded after a commit that went through
    finally:
        coordinator.terminate()
        admin.close()
    assert await exited(coordinator, 30) == 0
