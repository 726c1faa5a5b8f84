"""Redis ACL users for the four roles of a namespace: adapter, coordinator, launcher, observer.

``subagent-bus acl`` prints one ``ACL SETUSER`` line per role (``--format aclfile``: ``user`` lines for an
ACL file) and, with ``--apply``, installs them on the server (on every node of a cluster). Each role gets
the commands it runs and the keys it touches, nothing else. The rules use Redis 7 key permissions
(``%R~`` read-only, ``%W~`` write-only) and selectors (``(...)``: a command is allowed when the root
rules or one selector allow it together with every key it names, so a command can be granted on some
keys only). They need Redis 7.0+ or Valkey 7.2+.

Every role (the root rules): the connection commands (``+@connection -@dangerous``) minus ``SELECT``
(ACLs are not per database, so users stay in the database of their URL's default, 0) and ``CLIENT
TRACKING`` (broadcast tracking would report key names of every namespace), plus ``INFO`` (``connect``
asks ``INFO cluster`` to choose the cluster client) and ``CLUSTER SLOTS|SHARDS`` (the cluster client's
topology). No role has any other command without keys, so none can reach beyond its namespace through
``FLUSHALL``, ``SCAN``, ``KEYS``, ``RANDOMKEY``, ``FUNCTION FLUSH``, ``CONFIG``, ``ACL`` or ``SHUTDOWN``,
and none has a pub/sub channel.

- adapter: ``XADD`` to the signals and dead-letter streams, write-only (it cannot read what other agents
  published); on inboxes only what its consumer group ``adapter`` needs (``XGROUP CREATE``,
  ``XREADGROUP``, ``XAUTOCLAIM``, ``XPENDING``, ``XACK``); ``GET``/``SET`` of its checkpoints
  (``offset:*``, ``import:*``); ``GET`` of the namespace's meta key; ``MULTI``/``EXEC`` (a batch and its checkpoint are one
  transaction). No access at all to findings, events, tasks, state or leases.
- coordinator: its namespace's streams (read, ``XADD``, its consumer group's commands), ``XTRIM`` of the
  signals, events and tasks streams only, the group states (hashes, sets, lists), the leases (``SET``,
  ``PEXPIRE``, ``DEL``), the meta key, the members set, and ``EVAL``/``EVALSHA``/``SCRIPT LOAD`` (a
  script runs with the caller's permissions, command by command). Commands that remove or overwrite a
  key whatever its type (``DEL``, ``SET``, ``PEXPIRE``) are granted on the lease and meta keys only, and
  no role has ``XDEL``, ``XSETID`` or ``XGROUP DESTROY``: the findings stream is append-only for everyone.
- launcher: its consumer group ``launchers`` on the tasks streams, ``XADD`` (write-only) to the
  dead-letter streams, ``GET`` of the meta key. The adapters it starts have adapter credentials.
- observer: ``+@read`` on every key of the namespace with read-only key permissions, minus the commands
  that list key names of every namespace (``SCAN``, ``RANDOMKEY``, ``DBSIZE``; ``KEYS`` is
  ``@dangerous``). No write of any kind, not even ``XREADGROUP`` (its pending list is a write):
  observers follow streams with plain ``XRANGE``/``XREAD`` cursors.

Only the coordinator may write the meta key, so a coordinator (or an administrator) creates the
namespace; the other roles read its shard count.

Why the patterns cannot reach another namespace: Redis ACL patterns are globs where only ``* ? [ ] \\``
are special (braces are literal), and a namespace matches ``[A-Za-z0-9_.-]+``, so it is taken literally.
Every shard key of ``ns`` starts with ``{ns:`` followed by the shard number, and shard keys are matched
with one pattern per number of digits (``{ns:[0-9]}:signals`` ... ``{ns:[0-9][0-9][0-9][0-9][0-9]}:signals``),
so a pattern for one kind of key never matches another kind (an agent id holding ``}:signals`` makes an
inbox key that still is no signals stream). Another namespace ``other`` has keys ``{other:``, ``{other}:``
and ``other:coordinators``; none starts with ``{ns:``, ``{ns}:`` or equals ``ns:coordinators`` unless
``other == ns``, because a namespace has no ``:`` or ``}``.

What ACLs cannot express: a command's options. ``XADD ... MAXLEN 0`` (or ``MINID``) trims the stream it
appends to, so an adapter can trim its shard's signals stream and the coordinator any stream it appends
to; the coordinator's consumer group still holds every delivered entry's id and dead-letters an entry
deleted before it was applied. Adapters share the inboxes of their namespace (one user per agent would
be needed to separate them).

Passwords are never printed on stdout: the rules carry ``#<sha256>`` of the password. ``--password-env``
reads each role's password from an environment variable; ``--generate`` makes random ones and prints
each once, on stderr. Users installed with ``ACL SETUSER`` live in memory: ``ACL SAVE`` writes them to
the server's ACL file when it has one (or load the ``--format aclfile`` output with ``aclfile``).

TLS: connect with ``rediss://user:password@host:port/0``; redis-py's TLS options pass through the URL's
query: ``?ssl_ca_certs=/path/ca.pem`` (the CA that signed the server's certificate),
``ssl_certfile=...&ssl_keyfile=...`` (a client certificate, for ``tls-auth-clients yes``) and
``ssl_cert_reqs=none`` (no verification: testing only).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

import click
import redis.asyncio

from bus.connection import Client, connect, settings_from_options, translated
from bus.errors import BusError, CommandFailed, ConfigError
from bus.keys import Keys, meta_key
from bus.settings import MAX_SHARDS

__all__ = [
    "AclFormat",
    "AclUser",
    "Role",
    "acl",
    "apply_users",
    "password_hash",
    "role_rules",
    "user_for",
]

_SHARD_DIGITS: Final = len(str(MAX_SHARDS - 1))
_ROOT: Final = (
    "+@connection",
    "-@dangerous",
    "-select",
    "-client|tracking",
    "+info",
    "+cluster|slots",
    "+cluster|shards",
)
_TRANSACTION: Final = ("+multi", "+exec", "+discard")
_GROUP_READER: Final = ("+xgroup|create", "+xreadgroup", "+xautoclaim", "+xpending", "+xack")
_STREAMS: Final = ("signals", "events", "tasks", "findings", "dead", "inbox:*")
_TRIMMED: Final = ("signals", "events", "tasks")
_CHECKPOINTS: Final = ("offset:*", "import:*")
"""State keys of the adapters: file offsets (``adapter watch``) and ``adapter import-findings`` progress."""


class Role(StrEnum):
    """Who connects: each role is one ACL user per namespace."""

    ADAPTER = "adapter"
    COORDINATOR = "coordinator"
    LAUNCHER = "launcher"
    OBSERVER = "observer"


class AclFormat(StrEnum):
    COMMAND = "command"
    """``ACL SETUSER name rules...``: for redis-cli (piped on stdin) or any client."""
    ACLFILE = "aclfile"
    """``user name rules...``: lines of an ACL file (the server's ``aclfile`` option)."""


@dataclass(frozen=True, slots=True)
class AclUser:
    """One ACL user: its name and the arguments of ``ACL SETUSER`` after the name."""

    name: str
    role: Role
    rules: tuple[str, ...]

    def line(self, fmt: AclFormat = AclFormat.COMMAND) -> str:
        head = "ACL SETUSER" if fmt is AclFormat.COMMAND else "user"
        return " ".join((head, self.name, *self.rules))


def _shard_keys(namespace: str, suffix: str, perm: str = "~") -> list[str]:
    """``perm`` patterns matching ``{ns:<shard>}:<suffix>`` for every shard number, and nothing else."""
    return [f"{perm}{{{namespace}:{'[0-9]' * n}}}:{suffix}" for n in range(1, _SHARD_DIGITS + 1)]


def _selector(*rules: str | Iterable[str]) -> str:
    flat = [rule for item in rules for rule in ([item] if isinstance(item, str) else item)]
    return "(" + " ".join(flat) + ")"


def _keys(namespace: str, suffixes: Sequence[str], perm: str = "~") -> list[str]:
    return [pattern for suffix in suffixes for pattern in _shard_keys(namespace, suffix, perm)]


def _adapter(ns: str) -> list[str]:
    return [
        *_ROOT,
        *_TRANSACTION,
        _selector(_keys(ns, ("signals", "dead"), "%W~"), "+xadd"),
        _selector(_keys(ns, ("inbox:*",)), _GROUP_READER),
        _selector(_keys(ns, _CHECKPOINTS), "+get", "+set"),
        _selector(f"%R~{meta_key(ns)}", "+get"),
    ]


def _launcher(ns: str) -> list[str]:
    return [
        *_ROOT,
        *_TRANSACTION,
        _selector(_keys(ns, ("tasks",)), _GROUP_READER),
        _selector(_keys(ns, ("dead",), "%W~"), "+xadd"),
        _selector(f"%R~{meta_key(ns)}", "+get"),
    ]


def _coordinator(ns: str) -> list[str]:
    members = f"~{ns}:coordinators"
    stream_commands = (
        "+xadd", "+xack", "+xautoclaim", "+xgroup|create", "+xpending", "+xreadgroup",
        "+xrange", "+xrevrange", "+xread", "+xlen", "+xinfo|stream", "+xinfo|groups",
        "+xinfo|consumers", "+exists",
    )  # fmt: skip
    state_commands = (
        "+hset", "+hdel", "+hget", "+hgetall", "+sadd", "+smembers", "+sismember",
        "+rpush", "+ltrim", "+lrange",
    )  # fmt: skip
    return [
        *_ROOT,
        "+time",
        "+script|load",
        "+script|exists",
        # The keys a script declares must all fit one selector; its commands are checked one by one.
        _selector(_keys(ns, ("*",)), members, "+eval", "+evalsha"),
        _selector(_keys(ns, _STREAMS), stream_commands),
        _selector(_keys(ns, _TRIMMED), "+xtrim"),
        _selector(_keys(ns, ("signals",)), "+xgroup|delconsumer"),  # idle consumers of dead processes
        _selector(_keys(ns, ("group:*", "seen:*", "groups")), state_commands),
        _selector(_keys(ns, ("lease",)), "+get", "+set", "+pexpire", "+del"),
        _selector(_keys(ns, ("version",)), "+get", "+incr"),
        _selector(f"~{meta_key(ns)}", "+get", "+set"),
        _selector(members, "+zadd", "+zrem", "+zremrangebyscore", "+zcard", "+zrange"),
    ]


def _observer(ns: str) -> list[str]:
    return [
        *_keys(ns, ("*",), "%R~"),
        f"%R~{meta_key(ns)}",
        f"%R~{ns}:coordinators",
        "+@read",
        *_ROOT,
        "-scan",
        "-randomkey",
        "-dbsize",
    ]


_RULES: Final = {
    Role.ADAPTER: _adapter,
    Role.COORDINATOR: _coordinator,
    Role.LAUNCHER: _launcher,
    Role.OBSERVER: _observer,
}


def role_rules(role: Role, namespace: str) -> list[str]:
    """The permission rules of ``role`` in ``namespace`` (no ``reset``, state or password)."""
    Keys(namespace, 1)  # validates the namespace: ConfigError unless [A-Za-z0-9_.-]+
    return _RULES[role](namespace)


def password_hash(password: str) -> str:
    """The ``#<sha256>`` form of a password, as ``ACL SETUSER`` and ACL files take it."""
    if not password:
        raise ConfigError("an ACL password must not be empty")
    return "#" + hashlib.sha256(password.encode()).hexdigest()


def user_for(role: Role, namespace: str, password: str, *, prefix: str | None = None) -> AclUser:
    """The user of ``role``: ``reset`` (so applying it again replaces every earlier rule), ``on``, the
    password's hash, then the role's rules. The name is ``<prefix>-<role>``, the prefix defaulting to
    the namespace."""
    rules = role_rules(role, namespace)
    name = f"{prefix or namespace}-{role.value}"
    if not name or any(c.isspace() for c in name):
        raise ConfigError(f"{name!r} is not a valid ACL user name")
    return AclUser(name=name, role=role, rules=("reset", "on", password_hash(password), *rules))


async def apply_users(client: Client, users: Sequence[AclUser]) -> None:
    """``ACL SETUSER`` each user, on every node (primaries and replicas) of a cluster."""
    with translated():
        for user in users:
            if isinstance(client, redis.asyncio.RedisCluster):
                # A list of nodes, not the ALL_NODES flag: with a flag redis-py looks for a key in the arguments.
                await client.execute_command(
                    "ACL", "SETUSER", user.name, *user.rules, target_nodes=client.get_nodes()
                )
            else:
                await client.execute_command("ACL", "SETUSER", user.name, *user.rules)  # type: ignore[no-untyped-call]


# -- the command ---------------------------------------------------------------------------------------


def _env_passwords(
    specs: Sequence[str], roles: Sequence[Role], environ: Mapping[str, str]
) -> dict[Role, str]:
    """Each role's password from ``[ROLE=]VAR`` specs; a bare ``VAR`` only with a single role."""
    names: dict[Role, str] = {}
    for spec in specs:
        role_name, sep, var = spec.rpartition("=")
        if not sep:
            if len(roles) != 1:
                raise click.BadParameter(
                    "with several roles give ROLE=VAR for each (every role needs its own password)",
                    param_hint="--password-env",
                )
            names[roles[0]] = var
            continue
        try:
            names[Role(role_name)] = var
        except ValueError:
            choices = ", ".join(r.value for r in Role)
            raise click.BadParameter(
                f"{role_name!r} is not a role ({choices})", param_hint="--password-env"
            ) from None
    passwords: dict[Role, str] = {}
    for role in roles:
        variable = names.get(role)
        if variable is None:
            raise click.BadParameter(
                f"no variable names the {role.value} password", param_hint="--password-env"
            )
        value = environ.get(variable, "")
        if not value:
            raise click.BadParameter(f"${variable} is not set or empty", param_hint="--password-env")
        passwords[role] = value
    return passwords


def _passwords(password_env: Sequence[str], generate: bool, roles: Sequence[Role]) -> dict[Role, str]:
    if generate == bool(password_env):
        raise click.UsageError(
            "give either --password-env or --generate (a user without a password is refused)"
        )
    if generate:
        return {role: secrets.token_urlsafe(32) for role in roles}
    passwords = _env_passwords(password_env, roles, os.environ)
    if len(set(passwords.values())) != len(passwords):
        raise click.BadParameter("two roles have the same password", param_hint="--password-env")
    return passwords


async def _apply(
    redis_url: str | None, namespace: str, cluster: bool | None, users: Sequence[AclUser]
) -> str:
    settings = settings_from_options(redis_url, namespace, cluster)
    client = await connect(settings)
    try:
        await apply_users(client, users)
    finally:
        await client.aclose()
    return settings.display_url()


def _install(redis_url: str | None, namespace: str, cluster: bool | None, users: Sequence[AclUser]) -> str:
    try:
        return asyncio.run(_apply(redis_url, namespace, cluster, users))
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    except CommandFailed as exc:
        raise click.ClickException(f"{exc} (the role rules need Redis 7.0+ or Valkey 7.2+)") from None
    except BusError as exc:
        raise click.ClickException(str(exc)) from None


@click.command("acl")
@click.option("--namespace", envvar="SUBAGENT_BUS_NAMESPACE", default="sbus", show_default=True,
              help="The namespace the users may use.")  # fmt: skip
@click.option("--role", "roles", multiple=True, type=click.Choice([r.value for r in Role]),
              help="A role to print (repeatable). Default: every role.")  # fmt: skip
@click.option("--password-env", "password_env", multiple=True, metavar="[ROLE=]VAR",
              help="Read the ROLE's password from the environment variable VAR (repeatable; a bare VAR "
              "with a single --role).")  # fmt: skip
@click.option("--generate", is_flag=True, help="Generate random passwords; each is printed once, on stderr.")
@click.option("--user-prefix", default=None, help="User names are PREFIX-ROLE.  [default: the namespace]")
@click.option("--format", "fmt", type=click.Choice([f.value for f in AclFormat]), default=AclFormat.COMMAND.value,
              show_default=True, help="ACL SETUSER lines, or user lines for an ACL file.")  # fmt: skip
@click.option(
    "--apply", "apply_", is_flag=True, help="Install the users on the server (every node of a cluster)."
)
@click.option("--redis-url", envvar="SUBAGENT_BUS_REDIS_URL", default=None, metavar="URL",
              help="With --apply: the server, with credentials allowed to run ACL SETUSER.")  # fmt: skip
@click.option(
    "--cluster/--no-cluster", default=None, help="With --apply: force the cluster client on or off."
)
def acl(
    namespace: str,
    roles: tuple[str, ...],
    password_env: tuple[str, ...],
    generate: bool,
    user_prefix: str | None,
    fmt: str,
    apply_: bool,
    redis_url: str | None,
    cluster: bool | None,
) -> None:
    """Print (and with --apply install) one Redis ACL user per role of a namespace.

    \b
    adapter      publish signals, read its inbox, keep its offset checkpoints
    coordinator  everything the coordinators do in the namespace; no admin command
    launcher     read the tasks streams with the group "launchers"
    observer     read only, with plain cursors (no consumer group)

    Paste the output into redis-cli (`subagent-bus acl ... | redis-cli -u URL`) or an ACL file
    (--format aclfile). Passwords never appear on stdout, only their SHA-256. Needs Redis 7+ or
    Valkey 7.2+. Clients then connect with redis://USER:PASSWORD@host:port/0 (rediss:// for TLS).
    """
    selected = [Role(r) for r in dict.fromkeys(roles)] or list(Role)
    passwords = _passwords(password_env, generate, selected)
    try:
        users = [user_for(role, namespace, passwords[role], prefix=user_prefix) for role in selected]
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    # installed first: a generated password printed for users that never got installed is only a leak
    where = _install(redis_url, namespace, cluster, users) if apply_ else None
    for user in users:
        click.echo(user.line(AclFormat(fmt)))
    if generate:
        for user in users:
            click.echo(f"password of {user.name}: {passwords[user.role]}", err=True)
    if where is not None:
        click.echo(f"installed {', '.join(u.name for u in users)} on {where}", err=True)
