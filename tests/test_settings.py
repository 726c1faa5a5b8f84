"""Settings and URL parsing (pure: no server)."""

from __future__ import annotations

import inspect

import pytest

from agents import inbox_listener
from bus import tail
from bus.consumer import Consumer
from bus.errors import ConfigError
from bus.settings import (
    DEFAULT_SOCKET_TIMEOUT,
    LONGEST_BLOCK_MS,
    MIN_SOCKET_TIMEOUT,
    SentinelTarget,
    Settings,
    parse_sentinel_url,
    redact,
)
from coordinator.service import CoordinatorOptions


def test_defaults_and_keywords() -> None:
    settings = Settings.from_url("redis://localhost:6379/2", namespace="team.a", shards=16, cluster=False)
    assert (settings.namespace, settings.shards, settings.cluster) == ("team.a", 16, False)
    assert Settings.from_url("redis://h").cluster is None
    assert Settings.from_url("redis://h").namespace == "sbus"


def test_replies_are_waited_for_30_seconds_unless_told_otherwise() -> None:
    assert Settings.from_url("redis://h").socket_timeout == DEFAULT_SOCKET_TIMEOUT == 30.0
    assert Settings.from_url("redis://h", socket_timeout=None).socket_timeout is None
    assert Settings.from_url("redis://h", socket_timeout=2.5).socket_timeout == 2.5


def test_every_socket_timeout_the_cli_allows_is_above_every_blocking_read() -> None:
    consumer_default = inspect.signature(Consumer).parameters["block_ms"].default
    blocks = [consumer_default, tail._FOLLOW_BLOCK_MS, inbox_listener._POLL_MS, CoordinatorOptions().block_ms]
    assert max(blocks) <= LONGEST_BLOCK_MS
    assert LONGEST_BLOCK_MS / 1000 < MIN_SOCKET_TIMEOUT <= DEFAULT_SOCKET_TIMEOUT


def test_unknown_keyword_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"unknown setting\(s\) shard_count, timeout") as info:
        Settings.from_url("redis://h", shard_count=4, timeout=1)
    assert "shards" in str(info.value)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "empty"),
        (" redis://h", "spaces"),
        ("http://h:6379", "unsupported URL scheme 'http'"),
        ("localhost:6379", "unsupported URL scheme"),
        ("redis://:6379/0", "names no host"),
        ("redis://h:notaport/0", "invalid port"),
        ("redis://h:70000/0", "invalid port"),
        ("redis://h:6379/zero", "database number"),
        ("unix://", "no socket path"),
        (
            "unix://tmp/r.sock",
            "'tmp' is taken for a host, not the start of the socket's path; write the path after",
        ),
        ("redis+sentinel://h1:1,h2:x/master", "not a port number"),
        ("redis+sentinel://h1:26379", "/master-name"),
        ("redis+sentinel://h1/master/db", "not a number"),
        ("redis+sentinel://h1/m?bogus=1", "unknown option"),
        ("redis+sentinel://h1,,h2/m", "is not host:port"),
        # digits of other scripts: redis-py's int() fails on some (and the URL's db is then 0 unsaid)
        ("redis://h:6379/\u00b2", "database number"),
        ("redis+sentinel://h1/master/\u0663", "not a number"),
        ("redis+sentinel://h1:\u0663\u0663/master", "not a port number"),
    ],
)
def test_bad_urls_are_config_errors_with_a_clear_message(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Settings.from_url(url)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("namespace", "a b"),
        ("namespace", "a{b}"),
        ("shards", 0),
        ("socket_timeout", -1),
        ("max_connections", 0),
    ],
)
def test_bad_values_are_config_errors(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field):
        Settings.from_url("redis://h", **{field: value})


def test_cluster_cannot_be_forced_over_a_socket_or_sentinel() -> None:
    with pytest.raises(ConfigError, match="cannot reach a Redis Cluster"):
        Settings.from_url("unix:///tmp/r.sock", cluster=True)
    with pytest.raises(ConfigError, match="cannot reach a Redis Cluster"):
        Settings.from_url("redis+sentinel://h/m", cluster=True)


def test_sentinel_url_parsing() -> None:
    target = parse_sentinel_url("redis+sentinel://:s%40cret@h1:26380,[::1]:5000,h3/mymaster/3")
    assert target == SentinelTarget(
        hosts=(("h1", 26380), ("::1", 5000), ("h3", 26379)), master="mymaster", db=3, password="s@cret"
    )
    target = parse_sentinel_url("rediss+sentinel://user:pw@s1:1/m?sentinel_password=sp&sentinel_username=su")
    assert (target.username, target.password, target.ssl) == ("user", "pw", True)
    assert (target.sentinel_username, target.sentinel_password, target.db) == ("su", "sp", 0)
    assert Settings.from_url("redis+sentinel://s1/m").is_sentinel


def test_passwords_are_masked_for_display() -> None:
    assert redact("redis://user:secret@h:1/0") == "redis://user:***@h:1/0"
    assert redact("redis+sentinel://:pw@a:1,b:2/m") == "redis+sentinel://:***@a:1,b:2/m"
    assert redact("redis://h:1/0") == "redis://h:1/0"
    # a query option's name decoded as redis-py decodes it: pass%77ord is password
    assert redact("redis://h:1/0?pass%77ord=hunter2&x=1") == "redis://h:1/0?pass%77ord=***&x=1"
    assert redact("rediss://h/0?ssl%5Fpassword=k#f") == "rediss://h/0?ssl%5Fpassword=***#f"
    assert redact("redis://h/0?client_name=password") == "redis://h/0?client_name=password"
    with pytest.raises(ConfigError) as info:
        Settings.from_url("redis://u:topsecret@h:bad/0")
    assert "topsecret" not in str(info.value)
    assert "topsecret" not in repr(Settings.from_url("redis://u:topsecret@h:1/0"))


@pytest.mark.parametrize(
    "url",
    ["redis://:pa[ss@127.0.0.1:6379/0", "redis://u:p]w@h/0", "redis://[::1:6379/0", "redis://:pw@[vz]:1/0"],
)
def test_a_bracket_outside_an_ipv6_host_is_named_with_its_encoding(url: str) -> None:
    # it was said to read as / ? # @ or : once normalised, in a URL whose redacted form hid the bracket
    with pytest.raises(ConfigError, match=r"a \[ or \] outside an IPv6 host .* as %5B %5D"):
        Settings.from_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "redis:u:topsecret@h:6379/0",  # slashes missing
        "redis:/u:topsecret@h:6379",
        "rediss:\\\\u:topsecret@h",
        "unix:u:topsecret@/tmp/s.sock?bogus=1",
        "redis+sentinel:u:topsecret@h1/m",
        "redis://u:top\uff0fsecret@h:6379/0",  # a character that reads as / once normalised (NFKC)
        "rediss://u:topsecret\u2100x@h:6380/0",
        "redis://u:topsecret\uff20h/0",  # an @ once normalised
        "redis://u\uff1atopsecret@h/0",  # a colon once normalised
        "redis:/u:topsecret@h/x://y",  # a :// further on
        "redis:u:topsecret@h/0#a://b",
    ],
)
def test_a_url_refused_for_its_form_keeps_its_password_out_of_the_error(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_url(url)
    assert "topsecret" not in str(info.value) and "secret" not in str(info.value), str(info.value)
