"""``subagent-bus acl``: one Redis ACL user per role of a namespace (the roles and their rules:
:mod:`bus.acl_rules`).

The command prints one ``ACL SETUSER`` line per role (``--format aclfile``: ``user`` lines for an ACL
file) and, with ``--apply``, installs them on the server (on every node of a cluster). ``--role`` picks
some of the roles (adapter, coordinator, launcher, observer, human; default: all five); each user is
named ``<prefix>-<role>``, the prefix (``--user-prefix``) defaulting to the namespace. The rules need
Redis 7.0+ or Valkey 7.2+.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

import click
import redis.asyncio

from bus.acl_rules import Role, role_rules
from bus.cli_connection import NAMESPACE_ENV, URL_ENV, settings_from_options
from bus.connection import Client, connect, translated
from bus.errors import BusError, CommandFailed, ConfigError, PermissionDenied
from bus.params import EnvOption, utf8
from bus.settings import DEFAULT_NAMESPACE

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


def password_hash(password: str) -> str:
    """The ``#<sha256>`` form of a password, as ``ACL SETUSER`` and ACL files take it."""
    if not password:
        raise ConfigError("an ACL password must not be empty")
    return "#" + hashlib.sha256(password.encode()).hexdigest()


_UNQUOTABLE: Final = frozenset("'\"\\")
"""Characters of a user name that the lines printed for redis-cli or an ACL file cannot carry as such."""


def user_for(role: Role, namespace: str, password: str, *, prefix: str | None = None) -> AclUser:
    """The user of ``role``: ``reset`` (so applying it again replaces every earlier rule), ``on``, the
    password's hash, then the role's rules. The name is ``<prefix>-<role>``, the prefix defaulting to
    the namespace."""
    rules = role_rules(role, namespace)
    if prefix is not None and not prefix.strip():
        raise ConfigError("an empty user prefix: leave --user-prefix out to name users after the namespace")
    name = f"{prefix or namespace}-{role.value}"
    if any(c.isspace() or c in _UNQUOTABLE or not c.isprintable() for c in name):
        raise ConfigError(
            f"{name!r} is not a valid ACL user name: no spaces, quotes, backslashes or control characters "
            "(redis-cli and an ACL file would split or refuse the line)"
        )
    return AclUser(name=name, role=role, rules=("reset", "on", password_hash(password), *rules))


async def apply_users(client: Client, users: Sequence[AclUser]) -> None:
    """``ACL SETUSER`` each user, on every node (primaries and replicas) of a cluster."""
    with translated():
        for user in users:
            if isinstance(client, redis.asyncio.RedisCluster):
                # A list of nodes, not the ALL_NODES flag: with a flag redis-py looks for a key in the
                # arguments.
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
            role = Role(role_name)
        except ValueError:
            choices = ", ".join(r.value for r in Role)
            raise click.BadParameter(
                f"{role_name!r} is not a role ({choices})", param_hint="--password-env"
            ) from None
        if role not in roles:  # a slip that would otherwise be taken in silence
            chosen = ", ".join(r.value for r in roles)
            raise click.BadParameter(
                f"{role.value} is not among the roles chosen ({chosen}; see --role)",
                param_hint="--password-env",
            )
        names[role] = var
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
        if not utf8(value):
            raise click.BadParameter(f"${variable} is not valid UTF-8", param_hint="--password-env")
        passwords[role] = value
    return passwords


def _passwords(password_env: Sequence[str], generate: bool, roles: Sequence[Role]) -> dict[Role, str]:
    if generate and password_env:
        raise click.UsageError("give --password-env or --generate, not both")
    if not generate and not password_env:
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
    except PermissionDenied as exc:  # the user of the URL may not run ACL SETUSER
        raise click.ClickException(f"{exc} (--apply needs an administrator's URL)") from None
    except CommandFailed as exc:
        raise click.ClickException(f"{exc} (the role rules need Redis 7.0+ or Valkey 7.2+)") from None
    except BusError as exc:
        raise click.ClickException(str(exc)) from None


@click.command("acl")
@click.option("--namespace", envvar=NAMESPACE_ENV, cls=EnvOption, default=DEFAULT_NAMESPACE, show_default=True,
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
@click.option("--redis-url", envvar=URL_ENV, cls=EnvOption, default=None, metavar="URL",
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
    human        a person: what an observer may (status, inbox, findings, replay,
                 tail), plus appending to the signals streams (XADD only) for
                 answer, resolve, recover, approve, deny and dismiss; no consumer
                 group, no other write (trim stays an administrator's command)

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
