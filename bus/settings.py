"""Where the bus lives: the Redis URL, the namespace and the client options.

One URL names every deployment the bus runs on:

- ``redis://[user:password@]host:port[/db]`` and ``rediss://`` (TLS): a standalone server, or any node of
  a Redis Cluster (detected from the server unless ``cluster`` says otherwise);
- ``unix:///path/to/redis.sock[?db=N]``: a standalone server on a local socket;
- ``redis+sentinel://[user:password@]host1:port1,host2:port2/master[/db]`` (``rediss+sentinel://`` for
  TLS): the current master of ``master`` as the Sentinels report it. The password is the master's; the
  Sentinels' own password, if any, goes in ``?sentinel_password=...``.
"""

from __future__ import annotations

import math
import re
import ssl
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, Self
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator
from redis.asyncio.connection import URL_QUERY_ARGUMENT_PARSERS, to_bool

from bus.errors import ConfigError

__all__ = [
    "DEFAULT_NAMESPACE",
    "DEFAULT_SOCKET_TIMEOUT",
    "LONGEST_BLOCK_MS",
    "MAX_NAMESPACE_CHARS",
    "MAX_SHARDS",
    "MIN_SOCKET_TIMEOUT",
    "NAMESPACE_PATTERN",
    "SentinelTarget",
    "Settings",
    "check_url",
    "parse_sentinel_url",
    "redact",
]

NAMESPACE_PATTERN: Final = r"^[A-Za-z0-9_.-]+$"
DEFAULT_NAMESPACE: Final = "sbus"
MAX_NAMESPACE_CHARS: Final = 64
MAX_SHARDS: Final = 16384
"""One shard per Redis Cluster hash slot at most."""
LONGEST_BLOCK_MS: Final = 1000
"""The longest any blocking read of the project waits (``XREAD``/``XREADGROUP ... BLOCK``): a consumer's
default ``block_ms``, ``tail``'s follow, ``listen``'s polls; the coordinators block 500 ms. The reply to
a blocked read counts against the socket timeout, so every socket timeout must stay above this."""
DEFAULT_SOCKET_TIMEOUT: Final = 30.0
"""Seconds to wait for any reply. Without a limit, a server that accepts connections and never answers
(stalled, or not Redis at all) hangs every command for ever; 30 s is far above ``LONGEST_BLOCK_MS``, so
a follower or a coordinator never times out on an idle stream, and a server slower than that is
treated as unreachable: the long-running loops retry, one-shot commands fail with the error."""
MIN_SOCKET_TIMEOUT: Final = 2.0
"""The smallest ``--socket-timeout``: the longest block plus a second for the round trip."""
_SCHEMES: Final = ("redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel")
_SENTINEL_PORT: Final = 26379
_SENTINEL_QUERY: Final = frozenset({"sentinel_password", "sentinel_username"})
_TLS_QUERY: Final = frozenset(
    {
        "ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname", "ssl_ca_path",
        "ssl_ca_data", "ssl_password", "ssl_ciphers", "ssl_min_version", "ssl_include_verify_flags",
        "ssl_exclude_verify_flags",
    }
)  # fmt: skip
_TLS_FILES: Final = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
_CERT_REQS: Final = ("none", "optional", "required")
_TLS_VERSIONS: Final = {str(version.value): version.name for version in ssl.TLSVersion}
"""``ssl_min_version`` is one of these numbers (771 is TLS 1.2): redis-py hands it to ``ssl`` unchecked."""
_BOOLEANS: Final = frozenset({"", "true", "false", "1", "0", "yes", "no", "t", "f", "y", "n"})
_LEAST: Final = {"db": 0, "health_check_interval": 0, "socket_read_size": 1}
"""The smallest value of each number of the query that redis-py takes unchecked: below it every connection
fails at its first command, and a negative read size or health check interval as if the server were down."""
_SOCKET_TIMEOUT_OPTION: Final = (
    "use --socket-timeout (SUBAGENT_BUS_SOCKET_TIMEOUT), which the blocking reads are checked against"
)
_MANAGED: Final = {
    "socket_timeout": _SOCKET_TIMEOUT_OPTION,
    "timeout": _SOCKET_TIMEOUT_OPTION,
    "max_connections": "the bus needs a connection per shard loop and sizes its pools itself",
}
"""Query options redis-py takes that would undo what the bus relies on, and why they are refused."""
_QUERY: Final = frozenset(
    {name for name in URL_QUERY_ARGUMENT_PARSERS if not name.startswith("ssl_")} - set(_MANAGED)
    | {"client_name", "username", "password"}
)
"""What redis-py takes from a redis://, rediss:// or unix:// URL's query; anything else it hands to the
connection as a keyword, which fails at the first command with a TypeError."""
_ENCODE_HINT: Final = " (write / ? # @ % in a user name or password as %2F %3F %23 %40 %25)"
_HOST_PORT = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\[\]]+))(?::(?P<port>[^:]*))?$")


class SentinelTarget(BaseModel, extra="forbid", frozen=True):
    """A parsed ``redis+sentinel://`` URL."""

    hosts: tuple[tuple[str, int], ...] = Field(min_length=1)
    master: str = Field(min_length=1)
    db: int = Field(default=0, ge=0)
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None
    ssl: bool = False


class Settings(BaseModel, extra="forbid", frozen=True):
    """How to reach the bus. Build it with :meth:`from_url`, which reports mistakes as ``ConfigError``."""

    url: str
    namespace: str = Field(
        default=DEFAULT_NAMESPACE, pattern=NAMESPACE_PATTERN, max_length=MAX_NAMESPACE_CHARS
    )
    shards: int | None = Field(default=None, ge=1, le=MAX_SHARDS)
    """The shard count of a namespace this process creates; ``None``: 8. A namespace that exists keeps
    the count it was created with, and a different number here is an error
    (:func:`bus.keys.open_namespace`)."""
    cluster: bool | None = None
    """``None``: ask the server (``INFO cluster``); ``True``/``False``: force the client type."""
    socket_timeout: float | None = Field(default=DEFAULT_SOCKET_TIMEOUT, gt=0, allow_inf_nan=False)
    """Seconds to wait for a reply; keep it above every ``block_ms`` of the client's blocking reads (a
    :class:`~bus.consumer.Consumer` refuses one that is not). ``None``: no limit."""
    socket_connect_timeout: float = Field(default=5.0, gt=0, allow_inf_nan=False)
    max_connections: int | None = Field(default=None, ge=1)
    """Per server (per node on a cluster); ``None``: unbounded."""
    health_check_interval: float = Field(default=30.0, ge=0)

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # the URL as display_url() shows it: a Settings in a log line or a traceback keeps no password
        for name, value in super().__repr_args__():
            yield name, redact(value) if name == "url" else value

    @field_validator("url")
    @classmethod
    def _valid_url(cls, url: str) -> str:
        check_url(url)
        return url

    @model_validator(mode="after")
    def _cluster_needs_tcp(self) -> Self:
        if self.cluster and self.scheme not in ("redis", "rediss"):
            raise ValueError(
                f"a {self.scheme}:// URL cannot reach a Redis Cluster; use redis:// or rediss://"
            )
        return self

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> Settings:
        """Settings for ``url``; any other field as a keyword. Every mistake is a :class:`ConfigError`."""
        unknown = sorted(set(kwargs) - set(cls.model_fields))
        if unknown:
            known = ", ".join(name for name in cls.model_fields if name != "url")
            raise ConfigError(f"unknown setting(s) {', '.join(unknown)} (known: {known})")
        try:
            return cls(url=url, **kwargs)
        except ValidationError as exc:
            raise ConfigError(_describe(exc)) from None

    @property
    def scheme(self) -> str:
        return urlsplit(self.url).scheme.lower()

    @property
    def is_sentinel(self) -> bool:
        return self.scheme.endswith("+sentinel")

    def display_url(self) -> str:
        """The URL with any password masked, for messages and logs."""
        return redact(self.url)


def redact(url: str) -> str:
    """``url`` with the password (the part after ``user:`` before ``@``) and the value of every query
    option named ``*password`` (``sentinel_password``, ``ssl_password``) replaced by ``***``."""
    url = _redacted_query(url)
    head = _SCHEME.match(url)
    if any(ord(c) > 127 and _SEPARATORS.intersection(unicodedata.normalize("NFKC", c)) for c in url):
        # a character that reads as @ : / ? or # once normalised: where the password ends is not sure
        return f"{head.group(0) if head else ''}***"
    scheme, rest = (head.group(0)[:-1], url[head.end() :]) if head else ("", url)
    if not rest.startswith("//"):  # a slash short, or a backslash (redis:user:pw@host): all before @
        _, at, hosts = rest.rpartition("@")
        return f"{scheme}:***@{hosts}" if at else url
    userinfo, at, hosts = rest[2:].rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.split(":", 1)[0]
    return f"{scheme}://{user}:***@{hosts}"


_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_SEPARATORS: Final = frozenset("@:/?#")


def _redacted_query(url: str) -> str:
    """``url`` with the value of each query option whose name, decoded as redis-py decodes it
    (``pass%77ord`` is ``password``), ends in ``password`` replaced by ``***``."""
    head, mark, query = url.partition("?")
    if not mark:
        return url
    query, hash_, fragment = query.partition("#")
    pairs = []
    for pair in query.split("&"):
        name, equals, _ = pair.partition("=")
        secret = equals and unquote(name.replace("+", " ")).lower().endswith("password")
        pairs.append(f"{name}=***" if secret else pair)
    return f"{head}?{'&'.join(pairs)}{hash_}{fragment}"


def check_url(url: str) -> None:
    """Raise ``ValueError`` with a readable message unless ``url`` is one the bus can connect to."""
    if not url or url != url.strip():
        raise ValueError("the Redis URL is empty or has surrounding spaces")
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError as exc:  # its message shows the URL as it is, password and all
        if "IPv" in str(exc):  # a [ or ] not around an IP address ("Invalid IPv6 URL", "IPvFuture ...")
            raise ValueError(
                f"{redact(url)!r}: a [ or ] outside an IPv6 host ([::1]:6379), or one not closed: write [ ] "
                f"in a user name or password as %5B %5D{_ENCODE_HINT}"
            ) from None
        raise ValueError(
            f"{redact(url)!r}: a character of the user name, password or host reads as / ? # @ or : once "
            f"normalised (NFKC), which makes the URL ambiguous{_ENCODE_HINT}"
        ) from None
    if scheme not in _SCHEMES:
        raise ValueError(
            f"unsupported URL scheme {scheme or '(none)'!r} in {redact(url)!r}: use {', '.join(_SCHEMES)}"
        )
    if scheme != "unix" and _userinfo_cut_short(url):
        raise ValueError(f"{redact(url)!r}: the user name or password is cut short{_ENCODE_HINT}")
    if scheme.endswith("+sentinel"):
        parse_sentinel_url(url)
    elif scheme == "unix":
        parts = urlsplit(url)
        if not parts.path:
            raise ValueError(f"{redact(url)!r} names no socket path (unix:///path/to/redis.sock)")
        host = parts.netloc.rpartition("@")[2]
        if host:  # redis-py would connect to the path after it, without a word: unix://tmp/r.sock is /r.sock
            raise ValueError(
                f"{redact(url)!r}: {host!r} is taken for a host, not the start of the socket's path; "
                f"write the path after three slashes (unix:///{host}{parts.path})"
            )
        _check_query(url, tls=False)
    else:
        _check_tcp(url)
        _check_query(url, tls=scheme == "rediss")


def _check_query(url: str, *, tls: bool) -> None:
    """Refuse query options redis-py would pass on to the connection unchecked (a TypeError at the first
    command), values it cannot parse, and TLS options on a connection without TLS."""
    query = parse_qs(urlsplit(url).query, keep_blank_values=True)
    managed = sorted(set(query) & set(_MANAGED))
    if managed:
        raise ValueError(f"{redact(url)!r}: {managed[0]} is not taken from the URL: {_MANAGED[managed[0]]}")
    unknown = sorted(set(query) - _QUERY - _TLS_QUERY)
    if unknown:
        known = ", ".join(sorted(_QUERY)) + (", ssl_*" if tls else "")
        raise ValueError(f"{redact(url)!r}: unknown option(s) {', '.join(unknown)} (known: {known})")
    tls_given = sorted(set(query) & _TLS_QUERY)
    if tls_given and not tls:
        raise ValueError(f"{redact(url)!r}: {', '.join(tls_given)} needs TLS: use rediss://")
    for name, values in query.items():
        for value in values:  # of an option given twice, redis-py takes the first: each is checked
            problem = _value_problem(name, value)
            if problem is not None:
                raise ValueError(f"{redact(url)!r}: {problem}")


def _value_problem(name: str, value: str) -> str | None:
    """What is wrong with the value of a URL's query option, if anything."""
    parser = URL_QUERY_ARGUMENT_PARSERS.get(name)
    try:
        parsed = parser(value) if parser is not None and value != "" else None
    except (TypeError, ValueError):
        return f"{name}={value!r} is not a valid value"
    number = _number_problem(name, value, parsed)
    if number is not None:
        return number
    if parser is to_bool and value.lower() not in _BOOLEANS:  # redis-py takes any other text as true
        return f"{name}={value!r} is not true or false"
    return _tls_problem(name, value)


def _tls_problem(name: str, value: str) -> str | None:
    if name == "ssl_cert_reqs" and value not in _CERT_REQS:
        return f"ssl_cert_reqs must be one of {', '.join(_CERT_REQS)}"
    if name == "ssl_min_version" and value not in _TLS_VERSIONS:
        known = ", ".join(f"{number} ({label})" for number, label in _TLS_VERSIONS.items())
        return f"ssl_min_version={value!r} is not a TLS version: one of {known}"
    if name in _TLS_FILES and not Path(value).is_file():
        return f"{name}: no file {value!r}"
    return None


def _number_problem(name: str, value: str, parsed: object) -> str | None:
    """What is wrong with a number redis-py parsed from the query, which it would take as it is."""
    if name == "protocol" and value not in ("", "2", "3"):  # redis-py says so at the first connection
        return "protocol must be 2 or 3 (RESP2 or RESP3)"
    if name == "socket_connect_timeout" and isinstance(parsed, float) and not 0 < parsed < math.inf:
        return f"socket_connect_timeout={value!r} is not a number of seconds above 0"
    if name in _LEAST and isinstance(parsed, int) and parsed < _LEAST[name]:
        return f"{name}={value!r} is below {_LEAST[name]}"
    return None


def _check_tcp(url: str) -> None:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{redact(url)!r} has an invalid port") from None
    if not parts.hostname:
        raise ValueError(f"{redact(url)!r} names no host (redis://host:port/db)")
    if port == 0:
        raise ValueError(f"{redact(url)!r} has an invalid port")
    db = parts.path.strip("/")
    if db and not (db.isascii() and db.isdigit()):
        raise ValueError(f"{redact(url)!r}: the path must be a database number, not {db!r}")


def _userinfo_cut_short(url: str) -> bool:
    """Whether a ``/``, ``?`` or ``#`` in the user name or password ended the host part before its ``@``
    (the rest of the password would then be read as a host, a port or a path)."""
    parts = urlsplit(url)
    first_key = parts.query.split("&", 1)[0].split("=", 1)[0]
    return "@" in parts.path or "@" in parts.fragment or "@" in first_key


def parse_sentinel_url(url: str) -> SentinelTarget:
    """Parse ``redis+sentinel://[user:password@]h1:p1,h2:p2/master[/db][?sentinel_password=...]``.

    Raises ``ValueError`` with a readable message; a host without a port uses 26379.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if not scheme.endswith("+sentinel"):
        raise ValueError(f"{redact(url)!r} is not a redis+sentinel:// URL")
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    username, password = _userinfo(userinfo)
    hosts = tuple(_host_port(item, url) for item in hostlist.split(","))
    segments = [unquote(s) for s in parts.path.split("/") if s]
    if not segments or len(segments) > 2:
        raise ValueError(f"{redact(url)!r}: the path must be /master-name or /master-name/db")
    if len(segments) == 2 and not (segments[1].isascii() and segments[1].isdigit()):
        raise ValueError(f"{redact(url)!r}: database {segments[1]!r} is not a number")
    query = {key: values[-1] for key, values in parse_qs(parts.query, keep_blank_values=True).items()}
    unknown = sorted(set(query) - _SENTINEL_QUERY)
    if unknown:
        raise ValueError(
            f"{redact(url)!r}: unknown option(s) {', '.join(unknown)} "
            f"(known: {', '.join(sorted(_SENTINEL_QUERY))})"
        )
    return SentinelTarget(
        hosts=hosts,
        master=segments[0],
        db=int(segments[1]) if len(segments) == 2 else 0,
        username=username,
        password=password,
        sentinel_username=query.get("sentinel_username"),
        sentinel_password=query.get("sentinel_password"),
        ssl=scheme.startswith("rediss"),
    )


def _userinfo(userinfo: str) -> tuple[str | None, str | None]:
    if not userinfo:
        return None, None
    user, colon, password = userinfo.partition(":")
    return (unquote(user) or None), (unquote(password) if colon else None)


def _host_port(item: str, url: str) -> tuple[str, int]:
    match = _HOST_PORT.match(item.strip())
    if not item.strip() or match is None:
        raise ValueError(f"{redact(url)!r}: {item!r} is not host:port")
    port_text = match["port"]
    if port_text is None or port_text == "":
        port = _SENTINEL_PORT
    elif port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536:
        port = int(port_text)
    else:
        raise ValueError(f"{redact(url)!r}: {port_text!r} is not a port number")
    return (match["v6"] or match["host"]), port


def _describe(exc: ValidationError) -> str:
    messages = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"])
        message = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "string_pattern_mismatch" and where == "namespace":
            message = f"{err['input']!r} may hold only letters, digits, '_', '.' and '-'"
        messages.append(f"{where}: {message}" if where else message)
    return "invalid settings: " + "; ".join(messages)
