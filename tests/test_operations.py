"""Operations through the CLI and the public API: malformed URLs and timeouts are one-line errors, the
embedded server's start failures say why, and trim keeps what a stream's own reader has not read."""

from __future__ import annotations

import asyncio
import math
import socket
import subprocess
from pathlib import Path

import pytest
import redis
from adapter_kit import CLI
from click.testing import CliRunner
from workers.kit import connected, entries, read_group

import bus
from agents import delivery, launcher
from bus import retention
from bus.cli import main
from bus.connection import tcp_options
from bus.embedded import free_port
from bus.errors import ConfigError, EmbeddedRedisError
from bus.keys import Keys, StreamKind, open_namespace
from bus.local_server import ensure_local_server, stop_local_server
from bus.retention import trim, trim_inboxes, trim_namespace
from bus.settings import redact
from bus.signals import Progress
from coordinator import service
from coordinator.demo import DemoResult


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://h:6379/0?foo=bar", r"unknown option\(s\) foo \(known: client_name, db"),
        ("redis://h:6379/0?socket_connect_timeout=abc", "socket_connect_timeout='abc' is not a valid value"),
        (
            "redis://h:6379/0?socket_timeout=0.5",
            "socket_timeout is not taken from the URL: use --socket-timeout",
        ),
        ("redis://h:6379/0?max_connections=1", "max_connections is not taken from the URL: the bus needs"),
        ("rediss://h:6379/0?ssl_check_hostname=maybe", "ssl_check_hostname='maybe' is not true or false"),
        ("unix:///tmp/r.sock?db=x", "db='x' is not a valid value"),
        ("redis://h:6379/0?decode_responses=true", "unknown option"),
        ("redis://h:6379/0?ssl_ca_certs=/etc/hosts", "ssl_ca_certs needs TLS: use rediss://"),
        ("rediss://h:6379/0?ssl_cert_reqs=bogus", "ssl_cert_reqs must be one of none, optional, required"),
        ("rediss://h:6379/0?ssl_min_version=12", r"ssl_min_version='12' is not a TLS version: .* 771"),
        ("redis://h:6379/0?protocol=9", r"protocol must be 2 or 3 \(RESP2 or RESP3\)"),
        ("redis://h:6379/0?socket_connect_timeout=0", "socket_connect_timeout='0' is not a number of"),
        ("redis://h:6379/0?socket_connect_timeout=-1", "socket_connect_timeout='-1' is not a number of"),
        ("redis://h:6379/0?socket_connect_timeout=nan", "socket_connect_timeout='nan' is not a number of"),
        ("redis://h:6379/0?health_check_interval=-5", "health_check_interval='-5' is below 0"),
        ("redis://h:6379/0?socket_read_size=0", "socket_read_size='0' is below 1"),
        ("unix:///tmp/r.sock?db=-1", "db='-1' is below 0"),
        ("redis://h:6379/0?db=-1&db=0", "db='-1' is below 0"),  # redis-py takes the first
        ("redis://h:6379/0?protocol=9&protocol=3", r"protocol must be 2 or 3 \(RESP2 or RESP3\)"),
        ("rediss://h:6379/0?ssl_ca_certs=/no/such/ca.pem", "ssl_ca_certs: no file '/no/such/ca.pem'"),
        ("redis+sentinel://h/m?bogus=1", r"\(known: sentinel_password, sentinel_username\)"),
    ],
)
def test_url_options_redis_py_cannot_use_are_config_errors(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        bus.Settings.from_url(url)


def test_a_tls_version_by_its_number_is_taken() -> None:
    bus.Settings.from_url("rediss://h:6379/0?ssl_min_version=771")  # TLS 1.2


def test_a_namespace_of_other_characters_is_named_in_plain_words() -> None:
    with pytest.raises(
        ConfigError, match=r"namespace: 'bad ns' may hold only letters, digits, '_', '\.' and '-'"
    ):
        bus.Settings.from_url("redis://h", namespace="bad ns")


@pytest.mark.parametrize(
    "url",
    [
        "redis://u:pa/ss@h:1/0",
        "redis://:p@ss#w/rd@h:1/0",
        "redis://u:a?b@h:1/0",
        "redis+sentinel://u:x/yz@h/m",
    ],
)
def test_a_password_that_breaks_the_url_says_to_percent_encode_it_and_is_not_shown(url: str) -> None:
    with pytest.raises(ConfigError, match=r"password is cut short.*%2F %3F %23 %40") as info:
        bus.Settings.from_url(url)
    secret = url.partition(":")[2].partition(":")[2].rpartition("@")[0]
    assert secret not in str(info.value)


def test_passwords_in_the_query_are_masked_for_display() -> None:
    assert (
        redact("redis+sentinel://h/m?sentinel_password=s3&x=1")
        == "redis+sentinel://h/m?sentinel_password=***&x=1"
    )
    assert (
        redact("rediss://u:pw@h/0?ssl_password=k&ssl_ca_certs=/c")
        == "rediss://u:***@h/0?ssl_password=***&ssl_ca_certs=/c"
    )
    with pytest.raises(ConfigError) as info:
        bus.Settings.from_url("redis+sentinel://h/m?sentinel_password=topsecret&bogus=1")
    assert "topsecret" not in str(info.value)


def test_the_cli_refuses_a_bad_url_option_as_a_usage_error_without_a_traceback() -> None:
    for url in ("redis://127.0.0.1:1/0?foo=bar", "redis://127.0.0.1:1/0?db=abc"):
        for command in (["tail", "--timeout", "1"], ["trim"], ["acl", "--generate", "--apply"]):
            result = CliRunner().invoke(main, [*command, "--redis-url", url])
            assert result.exit_code == 2, (command, result.output)
            assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
            assert "Traceback" not in result.output


async def test_url_options_that_redis_py_knows_still_connect(redis_url: str) -> None:
    settings = bus.Settings.from_url(f"{redis_url}?client_name=ops-check&socket_connect_timeout=3&db=0")
    client = await bus.connect(settings)
    try:
        assert await client.client_getname() in ("ops-check", b"ops-check")
    finally:
        await client.aclose()


@pytest.mark.parametrize("value", [math.inf, math.nan])
def test_a_socket_timeout_that_is_not_finite_is_a_config_error(value: float) -> None:
    with pytest.raises(ConfigError, match="socket_timeout"):
        bus.Settings.from_url("redis://h", socket_timeout=value)


@pytest.mark.parametrize(
    ("command", "option"),
    [(["status"], "--socket-timeout"), (["tail"], "--socket-timeout"), (["tail"], "--timeout")],
)
@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_seconds_that_are_not_finite_are_usage_errors(command: list[str], option: str, value: str) -> None:
    args = [*command, "--redis-url", "redis://127.0.0.1:1/0", f"{option}={value}"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "is not a finite number" in result.output or "not in the range" in result.output


async def test_a_socket_timeout_beyond_what_tcp_takes_still_connects(redis_url: str) -> None:
    options = tcp_options(1e9)
    if hasattr(socket, "TCP_KEEPIDLE"):
        assert options[socket.TCP_KEEPIDLE] <= 32767 and options[socket.TCP_KEEPINTVL] <= 32767
    if hasattr(socket, "TCP_USER_TIMEOUT"):
        assert options[socket.TCP_USER_TIMEOUT] < 2**31
    client = await bus.connect(bus.Settings.from_url(redis_url, socket_timeout=3e6))
    try:
        assert await client.ping()
    finally:
        await client.aclose()


def test_a_lock_file_that_cannot_be_opened_is_a_clear_error(tmp_path: Path) -> None:
    data = tmp_path / ".subagent-bus"
    (data / "start.lock").mkdir(parents=True)
    with pytest.raises(EmbeddedRedisError, match=r"cannot keep the local Redis in .*start\.lock"):
        ensure_local_server(data)
    done = subprocess.run(
        [CLI, "status"], check=False, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and "cannot keep the local Redis in" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_server_that_refuses_to_start_says_why(tmp_path: Path) -> None:
    data = tmp_path / "with space" / ".subagent-bus"
    (data / "server.log").mkdir(parents=True)  # the server cannot open its log file
    with pytest.raises(EmbeddedRedisError, match=r"did not start .*log file"):
        ensure_local_server(data)


def test_a_daemon_that_dies_after_starting_is_reported_at_once(tmp_path: Path) -> None:
    data = tmp_path / ".subagent-bus"
    data.mkdir()
    (data / "appendonlydir").write_text("a file where the append-only directory goes")
    (data / "server.pid").write_text("999999999")  # a dead server's pid file is not taken for the new one's
    try:
        with pytest.raises(EmbeddedRedisError, match=r"redis-server exited: .*append-only dir"):
            ensure_local_server(data)
    finally:
        stop_local_server(data)


def test_the_readers_trim_waits_for_are_the_groups_the_bus_reads_with() -> None:
    assert retention._READERS == {StreamKind.SIGNALS: service.GROUP, StreamKind.TASKS: launcher.GROUP}
    assert retention._INBOX_READER == delivery.GROUP


async def test_trim_keeps_signals_no_coordinator_has_read_whatever_other_groups_acked(bus_url: str) -> None:
    keys = Keys("qatrim", 2)
    signals, tasks = keys.stream(0, StreamKind.SIGNALS), keys.stream(1, StreamKind.TASKS)
    inbox = keys.inbox(1, "agent-1")
    async with connected(bus_url) as client:
        await open_namespace(client, keys.namespace, keys.shards)
        for stream in (signals, tasks, inbox):
            for i in range(4):
                await client.xadd(stream, {"data": str(i).encode()})
            await client.xgroup_create(stream, "watcher", id="0")  # e.g. `tail --group watcher`
            await client.xack(stream, "watcher", *await read_group(client, stream, "watcher", 4))

        assert await trim(client, signals, reader="coordinator") == 0
        assert await trim_namespace(client, keys, maxlen_signals=None, maxlen_events=None) == 0
        assert await trim_inboxes(client, keys) == 0
        # nor to an explicit bound: a cron job's `trim --signals 1` before the first coordinator ran
        assert await trim_namespace(client, keys, maxlen_signals=1, maxlen_events=None, maxlen_tasks=0) == 0
        assert await trim(client, signals, minid="99999999999999", reader="coordinator") == 0
        assert await trim_inboxes(client, keys, maxlen=1) == 0
        for stream in (signals, tasks, inbox):
            assert await client.xlen(stream) == 4
        assert await trim(client, signals) == 4  # without a reader named, the groups there decide

        await client.xgroup_create(tasks, launcher.GROUP, id="0")
        await client.xack(tasks, launcher.GROUP, *await read_group(client, tasks, launcher.GROUP, 3))
        assert (
            await trim_namespace(client, keys, maxlen_signals=None, maxlen_events=None, maxlen_tasks=None)
            == 3
        )
        assert len(await entries(client, tasks)) == 1
        assert (
            await trim(client, keys.stream(0, StreamKind.TASKS), maxlen=0, reader=launcher.GROUP) == 0
        )  # none


def test_the_trim_command_keeps_signals_a_tail_group_acknowledged_before_any_coordinator(
    redis_url: str,
) -> None:
    async def fill() -> None:
        async with connected(redis_url) as client:
            keys = await open_namespace(client, "qatrimcli", 1)
            progress = Progress(agent_id="a", percent=10, message="started")
            envelope = bus.new_envelope(progress, agent_id="a", group_id="g")
            await bus.Publisher(client, keys).publish(envelope)

    asyncio.run(fill())
    common = ["--redis-url", redis_url, "--namespace", "qatrimcli"]
    tailed = CliRunner().invoke(main, ["tail", "--group", "watcher", "--from", "0", "--count", "1", *common])
    assert tailed.exit_code == 0, tailed.output
    trimmed = CliRunner().invoke(main, ["trim", *common])
    assert trimmed.exit_code == 0, trimmed.output
    assert "signals: 0 entries removed" in trimmed.output.splitlines()
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.xlen("{qatrimcli:0}:signals") == 1
    finally:
        client.close()


def test_the_demo_s_json_names_its_server_without_the_password() -> None:
    data = DemoResult(url="redis://user:hunter2@h:6379/0", namespace="demo-x").as_data()
    assert data["url"] == "redis://user:***@h:6379/0"


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-5"])
def test_the_demo_refuses_a_timeout_that_is_not_a_positive_number_of_seconds(value: str) -> None:
    result = CliRunner().invoke(main, ["demo", "--redis-url", "redis://127.0.0.1:1/0", "--timeout", value])
    assert result.exit_code == 2, result.output


def test_the_demo_against_an_unreachable_server_is_a_one_line_error(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    args = ["demo", "--redis-url", f"redis://127.0.0.1:{port}/0", "--workdir", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)
    assert result.output.splitlines()[-1].startswith("Error: Redis unavailable")
