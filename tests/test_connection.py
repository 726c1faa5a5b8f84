"""Connecting through every URL kind to real servers, and the error seam."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import click
import orjson
import pytest
import redis
import redis.asyncio
from adapter_kit import wait_until
from click.testing import CliRunner

from bus import wire
from bus.cli import main
from bus.cli_connection import default_url, redis_options
from bus.connection import connect, refused_for_now, translated
from bus.embedded import RedisCluster, RedisProcess, find_binary, free_port
from bus.errors import CommandFailed, ConfigError, ConnectionFailed
from bus.local_server import stop_local_server
from bus.settings import Settings


async def test_standalone_is_a_plain_client(redis_url: str) -> None:
    client = await connect(Settings.from_url(redis_url))
    try:
        assert type(client) is redis.asyncio.Redis
        assert await client.ping()
    finally:
        await client.aclose()


@pytest.mark.cluster
async def test_a_cluster_node_is_detected(redis_cluster: RedisCluster, cluster_url: str) -> None:
    client = await connect(Settings.from_url(cluster_url))
    try:
        assert isinstance(client, redis.asyncio.RedisCluster)
        for i in range(20):  # keys on every node
            await client.set(f"k{i}", i)
        assert len(client.get_primaries()) == 3
    finally:
        await client.aclose()
    plain = await connect(Settings.from_url(cluster_url, cluster=False))
    assert type(plain) is redis.asyncio.Redis
    await plain.aclose()


@pytest.mark.cluster
@pytest.mark.parametrize("database", ["/3", "/0?db=3", "/0?db=3&db=0", "/0?db=+3"])
async def test_a_cluster_has_only_database_zero(
    redis_cluster: RedisCluster, cluster_url: str, database: str
) -> None:
    # redis-py takes the query's db over the path's: given there, it is no outage either
    with pytest.raises(ConfigError, match="only database 0, not 3"):
        await connect(Settings.from_url(cluster_url.rsplit("/", 1)[0] + database))


async def test_forcing_cluster_on_a_standalone_server_is_a_config_error(redis_url: str) -> None:
    with pytest.raises(ConfigError, match="not a cluster node"):
        await connect(Settings.from_url(redis_url, cluster=True))


async def test_unreachable_server_is_connection_failed() -> None:
    settings = Settings.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=1)
    with pytest.raises(ConnectionFailed, match="unavailable"):
        await connect(settings)


async def test_a_server_that_is_no_redis_is_named_as_such() -> None:
    async def http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()

    server = await asyncio.start_server(http, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(CommandFailed, match="the server did not answer as Redis does") as refused:
            await connect(Settings.from_url(f"redis://127.0.0.1:{port}/0"))
    finally:
        server.close()
    assert "check that the URL's host and port are a Redis server's" in str(refused.value)


async def test_unix_socket(tmp_path: Path) -> None:
    sock = tmp_path / "r.sock"
    server = RedisProcess(tmp_path / "unix", config={"unixsocket": str(sock), "unixsocketperm": "700"})
    server.start()
    try:
        client = await connect(Settings.from_url(f"unix://{sock}?db=1"))
        await client.set("k", "v")
        assert await client.get("k") == b"v"
        await client.aclose()
        assert server.client().dbsize() == 0  # it went to database 1
    finally:
        server.stop()


@pytest.fixture
def sentinel(redis_server: RedisProcess, redis_url: str, tmp_path: Path) -> Iterator[int]:
    """A real Sentinel watching the session server as master ``main``."""
    port = free_port()
    conf = tmp_path / "sentinel.conf"
    conf.write_text(f"port {port}\nbind 127.0.0.1\nsentinel monitor main 127.0.0.1 {redis_server.port} 1\n")
    process = subprocess.Popen(
        [str(find_binary()), str(conf), "--sentinel", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_master(port, process)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)


def _wait_for_master(port: int, process: subprocess.Popen[bytes]) -> None:
    client = redis.Redis(port=port, socket_connect_timeout=0.5)
    deadline = time.monotonic() + 15
    try:
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if client.execute_command("SENTINEL GET-MASTER-ADDR-BY-NAME", "main"):  # type: ignore[no-untyped-call]
                    return
            except redis.ConnectionError:
                pass
            time.sleep(0.02)  # a starting process has no readiness signal of its own
    finally:
        client.close()
    raise AssertionError("the sentinel did not start")


async def test_sentinel_url_reaches_the_master(sentinel: int, redis_server: RedisProcess) -> None:
    url = f"redis+sentinel://127.0.0.1:{sentinel},127.0.0.1:{free_port()}/main/2"
    client = await connect(Settings.from_url(url))
    try:
        await client.set("via-sentinel", "yes")
        await wire.execute(client, b"via-wire", [(b"SET", b"via-wire", b"yes")])  # the hot paths' pipeline
    finally:
        await client.aclose()
    direct = redis.Redis(port=redis_server.port, db=2)
    assert direct.mget("via-sentinel", "via-wire") == [b"yes", b"yes"]
    direct.close()


async def test_unknown_sentinel_master_is_connection_failed(sentinel: int) -> None:
    with pytest.raises(ConnectionFailed) as info:
        await connect(Settings.from_url(f"redis+sentinel://127.0.0.1:{sentinel}/nope"))
    assert str(info.value) == (
        "Redis unavailable (MasterNotFoundError): no Sentinel gives the address of master 'nope': "
        f"127.0.0.1:{sentinel} does not monitor it"
    )


async def test_a_server_listed_as_a_sentinel_by_mistake_is_skipped(
    sentinel: int, redis_server: RedisProcess
) -> None:
    # the master itself first in the list: it answers SENTINEL with an error, and the next is asked
    url = f"redis+sentinel://127.0.0.1:{redis_server.port},127.0.0.1:{sentinel}/main"
    client = await connect(Settings.from_url(url))
    await client.aclose()
    with pytest.raises(ConnectionFailed) as info:
        await connect(Settings.from_url(f"redis+sentinel://127.0.0.1:{redis_server.port}/main"))
    assert f"127.0.0.1:{redis_server.port} is not a Sentinel (unknown command" in str(info.value)


def _unreachable_sentinels() -> tuple[str, str]:
    """A Sentinel URL whose Sentinels do not listen, and the one-line error it gives."""
    first, second = free_port(), free_port()
    url = f"redis+sentinel://:secret@127.0.0.1:{first},127.0.0.1:{second}/main/1?sentinel_password=s3"
    return url, (
        "Redis unavailable (MasterNotFoundError): no Sentinel gives the address of master 'main': "
        f"127.0.0.1:{first} is unreachable (Connection refused); "
        f"127.0.0.1:{second} is unreachable (Connection refused)"
    )


async def test_unreachable_sentinels_are_named_with_the_master_and_why() -> None:
    url, expected = _unreachable_sentinels()
    with pytest.raises(ConnectionFailed) as info:
        await connect(Settings.from_url(url))
    assert str(info.value) == expected


def test_unreachable_sentinels_are_one_line_on_the_command_line() -> None:
    url, expected = _unreachable_sentinels()
    result = CliRunner().invoke(main, ["status", "--redis-url", url])
    assert (result.exit_code, result.stdout, result.stderr) == (1, "", f"Error: {expected}\n")


async def test_refused_commands_become_command_failed_and_watch_error_passes(redis_url: str) -> None:
    client = await connect(Settings.from_url(redis_url))
    try:
        await client.set("text", "v")
        with pytest.raises(CommandFailed, match="WRONGTYPE"), translated():
            await client.xadd("text", {"data": b"x"})
        with pytest.raises(redis.WatchError), translated():
            async with client.pipeline(transaction=True) as pipe:
                await pipe.watch("text")
                await client.set("text", "changed")
                pipe.multi()  # type: ignore[no-untyped-call]
                pipe.set("text", "mine")
                await pipe.execute()
        assert await client.get("text") == b"changed"
    finally:
        await client.aclose()


def test_default_url_starts_the_local_server(tmp_path: Path) -> None:
    url = default_url(tmp_path / "data")
    try:
        assert url.startswith("redis://127.0.0.1:")
        assert default_url(tmp_path / "data") == url
    finally:
        stop_local_server(tmp_path / "data")


@click.command()
@redis_options
def _show(settings: Settings) -> None:
    click.echo(f"{settings.url} {settings.namespace} {settings.cluster}")


def test_shared_options_build_settings(redis_url: str) -> None:
    runner = CliRunner()
    result = runner.invoke(_show, ["--redis-url", redis_url, "--namespace", "n1", "--no-cluster"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"{redis_url} n1 False"
    result = runner.invoke(
        _show, [], env={"SUBAGENT_BUS_REDIS_URL": redis_url, "SUBAGENT_BUS_NAMESPACE": "n2"}
    )
    assert result.output.strip() == f"{redis_url} n2 None"
    result = runner.invoke(_show, ["--redis-url", "http://nope"])
    assert result.exit_code == 2
    assert "unsupported URL scheme" in result.output


def test_shards_option_creates_a_namespace_and_refuses_another_count(redis_url: str) -> None:
    runner = CliRunner()
    base = ["status", "--json", "--redis-url", redis_url, "--namespace", "sharded"]
    assert runner.invoke(main, [*base, "--shards", "4"]).exit_code == 0  # a view creates nothing
    assert redis.Redis.from_url(redis_url).get("{sharded}:meta") is None
    coordinator = ["coordinator", "--burst", "--redis-url", redis_url, "--namespace", "sharded"]
    result = runner.invoke(main, [*coordinator, "--shards", "4"])
    assert result.exit_code == 0, result.output
    assert redis.Redis.from_url(redis_url).get("{sharded}:meta") == b"4"
    assert runner.invoke(main, base).exit_code == 0  # without --shards: the namespace as it is
    result = runner.invoke(main, base, env={"SUBAGENT_BUS_SHARDS": "16"})
    assert result.exit_code == 1
    assert "'sharded' has 4 shards, not 16" in result.output
    result = runner.invoke(main, [*base, "--shards", "0"])
    assert result.exit_code == 2
    assert "--shards" in result.output
    assert redis.Redis.from_url(redis_url).get("{sharded}:meta") == b"4"


def test_a_coordinator_of_many_shards_is_not_held_back_by_a_pool_size(redis_url: str) -> None:
    """A coordinator holds a connection per shard loop; redis-py's pools stop at 100 unless told
    otherwise, which ended a coordinator of 64 shards with MaxConnectionsError."""
    options = ["--redis-url", redis_url, "--namespace", "wide"]
    cli = str(Path(sys.executable).parent / "subagent-bus")
    for group in ("a", "b", "c"):
        adapter = [cli, "adapter", "stdin", "--agent-id", "x", "--group", group, "--shards", "160", *options]
        done = subprocess.run(adapter, input=b"", capture_output=True, check=False, timeout=120)
        assert done.returncode == 0, done.stderr
    result = CliRunner().invoke(main, ["coordinator", "--burst", *options])
    assert result.exit_code == 0, result.output
    status = CliRunner().invoke(main, ["status", "--json", *options])
    assert sorted(g["group_id"] for g in orjson.loads(status.output)) == ["a", "b", "c"]


def test_an_argument_that_is_not_utf8_is_a_usage_error(redis_url: str) -> None:
    bad = b"\xff".decode(errors="surrogateescape")  # what Python makes of such a byte in argv
    for args in (["status", "--group", bad], ["answer", "agent", f"Q1={bad}"], ["findings", "add", bad]):
        result = CliRunner().invoke(main, [*args, "--redis-url", redis_url])
        assert result.exit_code == 2, (args, result.output)
        assert "is not valid UTF-8" in result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)


def test_an_environment_variable_that_is_not_utf8_is_a_usage_error() -> None:
    """Not a traceback where it is first encoded (the URL's password, an ACL password)."""
    bad = b"\xff".decode(errors="surrogateescape")
    for args, env, said in (
        (["tail", "--stream", "signals"], {"SUBAGENT_BUS_REDIS_URL": f"redis://u:p{bad}@127.0.0.1:1/0"},
         "$SUBAGENT_BUS_REDIS_URL ('redis://u:p\\xff@127.0.0.1:1/0') is not valid UTF-8"),
        (["acl", "--role", "adapter", "--password-env", "PW"], {"PW": f"pass{bad}"},
         "Invalid value for --password-env: $PW is not valid UTF-8"),
    ):  # fmt: skip
        result = CliRunner().invoke(main, args, env=env)
        assert result.exit_code == 2, (args, result.output)
        assert said in result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
    # a path may hold any bytes: a key file's is opened as it is
    named = CliRunner().invoke(main, ["--version"], env={"SUBAGENT_BUS_HUMAN_KEY_FILE": f"/keys/h{bad}"})
    assert named.exit_code == 0, named.output


def test_status_watch_needs_a_positive_interval(redis_url: str) -> None:
    result = CliRunner().invoke(main, ["status", "--watch", "0", "--redis-url", redis_url])
    assert result.exit_code == 2 and "--watch" in result.output


async def test_a_server_in_trouble_refuses_for_now(fresh_redis: RedisProcess) -> None:
    """Out of memory, or running a script that does not end: the command did nothing, and is a lost
    connection's error (written again later), not a refusal (dropped)."""
    client = await connect(Settings.from_url(fresh_redis.url))
    admin = fresh_redis.client()
    try:
        admin.config_set("maxmemory", 1)
        with pytest.raises(ConnectionFailed, match="OutOfMemoryError"), translated():
            await client.xadd("s", {"data": b"x"})
        with pytest.raises(ConnectionFailed, match="OutOfMemoryError"):
            await wire.execute(client, "s", [(b"XADD", b"s", b"*", b"data", b"x")])
        admin.config_set("maxmemory", 0)
        admin.config_set("busy-reply-threshold", 10)
        runaway = asyncio.create_task(asyncio.to_thread(_run_away, fresh_redis))

        async def busy() -> bool:
            try:
                await client.get("nothing")
            except redis.ResponseError as exc:
                return str(exc).startswith("BUSY")
            return False

        await wait_until(busy, 30, "the script to hold the server")
        with pytest.raises(ConnectionFailed, match="BUSY"), translated():
            await client.xadd("s", {"data": b"x"})
        admin.script_kill()
        await runaway
        assert await client.xlen("s") == 0
    finally:
        admin.config_set("maxmemory", 0)
        admin.close()
        await client.aclose()


def _run_away(server: RedisProcess) -> None:
    client = server.client()
    try:
        with pytest.raises(redis.ResponseError, match="killed"):
            client.eval("while true do end", 0)
    finally:
        client.close()


def test_only_a_server_in_trouble_refuses_for_now() -> None:
    for said, for_now in [
        ("MISCONF Errors writing to the AOF file: No space left on device", True),
        ("BUSY Redis is busy running a script. You can only call SCRIPT KILL or FUNCTION KILL.", True),
        ("BUSYKEY Target key name already exists.", False),
        (
            "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)",
            True,
        ),
        ("ERR unknown command 'XADD'", False),
    ]:
        assert refused_for_now(redis.ResponseError(said)) is for_now, said
    assert refused_for_now(redis.exceptions.OutOfMemoryError("command not allowed")) is True
    assert refused_for_now(redis.exceptions.NoPermissionError("MISCONF lookalike")) is False
