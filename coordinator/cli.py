"""Commands of the coordinator side: run a coordinator (or `up`, or the demo); the views of its state are
:mod:`coordinator.views_cli`'s and :mod:`coordinator.findings_cli`'s, the human commands
:mod:`coordinator.human`'s."""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import signal
from dataclasses import replace

import click
import redis.asyncio

from bus.cli_connection import redis_options, run_command
from bus.connection import Client, connect, translated
from bus.errors import ConfigError, NamespaceMissing
from bus.human_key import KEY_FILE_ENV
from bus.keys import DEFAULT_SHARDS, open_namespace
from bus.logs import setup_logging
from bus.metrics import Metrics
from bus.ops import serve_metrics
from bus.params import EnvOption, FiniteFloatRange, process_name
from bus.settings import Settings
from bus.stop_signals import handled_stop_signals
from coordinator.demo import demo
from coordinator.findings_cli import commands as findings_commands
from coordinator.human import commands as human_commands
from coordinator.policy import Policy
from coordinator.runtime import collect_garbage, tune_gc
from coordinator.service import Coordinator, CoordinatorOptions
from coordinator.views_cli import HUMAN_KEY_OPTION, POLICY_OPTION
from coordinator.views_cli import commands as view_commands

__all__ = ["commands"]


log = logging.getLogger("subagent_bus.coordinator")

_METRICS_PORT = click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    metavar="PORT",
    help="Serve Prometheus metrics on this port.",
)


@click.command("coordinator")
@click.option(
    "--name",
    callback=process_name,
    help="Consumer name of this process (default: random). Names may change on restart.",
)
@POLICY_OPTION
@click.option("--burst", is_flag=True, help="Apply everything pending, then exit (for scripts and tests).")
@click.option(
    "--batch",
    type=click.IntRange(1, 10_000),
    default=100,
    show_default=True,
    help="Entries per read and commit.",
)
@click.option(
    "--lease-ttl",
    "lease_ttl_ms",
    type=click.IntRange(1_000, 86_400_000),
    default=5000,
    show_default=True,
    help="Shard lease TTL in ms: how long a dead coordinator's shards wait to be taken over.",
)
@click.option(
    "--tick",
    "tick_s",
    type=FiniteFloatRange(min=0.1),
    default=5.0,
    show_default=True,
    help="Seconds between timeout checks.",
)
@click.option(
    "--max-deliveries",
    type=click.IntRange(min=1),
    default=CoordinatorOptions.max_deliveries,
    show_default=True,
    help="An entry read more often than this without being committed (one that takes down or stalls "
    "every coordinator that reads it) goes to the dead-letter stream instead of being applied.",
)
@HUMAN_KEY_OPTION
@_METRICS_PORT
@click.option("--metrics-host", default="127.0.0.1", show_default=True, help="Address for --metrics-port.")
@click.option(
    "--log-json",
    is_flag=True,
    envvar="SUBAGENT_BUS_LOG_JSON",
    cls=EnvOption,
    help="Log one JSON object per line.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    show_default=True,
    help="The least important messages logged.",
)
@redis_options
def run_coordinator(
    settings: Settings,
    name: str | None,
    policy: Policy,
    burst: bool,
    batch: int,
    lease_ttl_ms: int,
    tick_s: float,
    max_deliveries: int,
    human_key: bytes | None,
    metrics_port: int | None,
    metrics_host: str,
    log_json: bool,
    log_level: str,
) -> None:
    """Apply the protocol's rules to every signal, exactly once and in order.

    Run as many as you like, on any machines: they split the shards through leases, and a shard whose
    coordinator dies is taken over (its pending entries first) once the lease expires. SIGTERM, Ctrl-C
    or SIGHUP (its terminal closed; not under nohup) applies every entry pending on its shards (the
    batch in hand included) and releases the leases; a second one stops it at once (as a crash would:
    what it had not committed is applied by whoever takes its shards over once its leases expire).

    \b
    Example:
      subagent-bus coordinator --policy policy.toml
    """
    options = CoordinatorOptions(
        batch=batch,
        lease_ttl_ms=lease_ttl_ms,
        tick_interval_s=tick_s,
        max_deliveries=max_deliveries,
        human_key=human_key,
    )
    if name:
        options = replace(options, name=name)
    logs = (log_json, log_level)
    _serve(settings, policy, options, burst=burst, metrics_at=(metrics_port, metrics_host), logs=logs)


def _serve(
    settings: Settings,
    policy: Policy,
    options: CoordinatorOptions,
    *,
    burst: bool,
    metrics_at: tuple[int | None, str],
    logs: tuple[bool, str],
    ready: str | None = None,
) -> None:
    """Run a coordinator; ``ready`` is printed once it serves its metrics and has its namespace."""
    setup_logging(json=logs[0], level=logs[1])
    metrics_port, metrics_host = metrics_at
    metrics = Metrics("coordinator") if metrics_port else None
    if metrics and metrics_port:
        serve_metrics(metrics, metrics_port, metrics_host)
    tune_gc()

    async def main() -> int:
        client = await connect(settings)
        try:
            return await coordinate(client)
        finally:
            await client.aclose()

    async def coordinate(client: Client) -> int:
        if not settings.is_sentinel:  # Sentinel names the master at each connection: a failover in progress
            await _check_master(client)
        try:
            keys = await open_namespace(client, settings.namespace, settings.shards, create=False)
        except NamespaceMissing:  # checked before the namespace is created with that count
            await _check_connections(client, settings.shards or DEFAULT_SHARDS)
            keys = await open_namespace(client, settings.namespace, settings.shards)
        else:
            await _check_connections(client, keys.shards)
        coordinator = Coordinator(client, keys, policy, options, metrics)
        await coordinator.join(burst=burst)  # before it says it is up
        if ready is not None and logs[0]:  # one JSON object per line: the text is one record's message
            log.info("%s", ready.rstrip("\n"))
        elif ready is not None:
            click.echo(ready, err=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in handled_stop_signals():
            loop.add_signal_handler(sig, _on_signal, stop, sig)
        log.info("coordinator %s: %d shards in namespace %s", options.name, keys.shards, keys.namespace)
        collector = asyncio.create_task(collect_garbage(stop))
        try:
            return await coordinator.run(stop=stop, burst=burst)
        finally:
            stop.set()
            await collector

    applied = run_command(main())
    entries = "entry" if applied == 1 else "entries"
    log.info("coordinator %s stopped after applying %d %s", options.name, applied, entries)


async def _check_master(client: Client) -> None:
    """Refuse a replica's URL at the start: its every write is refused with ``READONLY``, which a running
    coordinator takes for a failover under way and waits out, for ever when the URL is simply wrong. (A
    cluster's replicas redirect to their master, which the client follows: not checked.)"""
    if isinstance(client, redis.asyncio.RedisCluster):
        return
    with translated():
        replication = await client.info("replication")
    if replication.get("role") == "slave":
        master = f"{replication.get('master_host')}:{replication.get('master_port')}"
        raise ConfigError(
            f"the server is a read-only replica (of {master}): give the master's URL, or a "
            "redis+sentinel:// URL that finds the master"
        )


async def _check_connections(client: Client, shards: int) -> None:
    """A coordinator holds up to two connections per shard it owns (the shard loop's own, for its reads,
    commits and lease scripts, and one of the shared pool for its short commands), and may own them all:
    refuse a count the server's ``maxclients`` can never take, rather than lock every client of the server
    out. (Other coordinators are not counted: they share the shards with this one. On a cluster each node
    holds a part of the shards: not checked.)"""
    if isinstance(client, redis.asyncio.RedisCluster):
        return
    with translated():
        limit = int((await client.info("clients")).get("maxclients", 0))
    if limit and 2 * shards > limit:
        raise ConfigError(
            f"a coordinator of {shards} shards may hold {2 * shards} connections (two per shard), more than "
            f"the {limit} clients the server takes: use a namespace of fewer shards, or raise the server's "
            "maxclients"
        )


def _on_signal(stop: asyncio.Event, sig: signal.Signals) -> None:
    """The first stop signal (SIGTERM, SIGINT, SIGHUP) stops gracefully; a second one (the server
    stalled, say, and the graceful stop waits for it) exits at once, which loses nothing: commits are
    atomic."""
    if not stop.is_set():
        log.info("%s: stopping after the entries pending on this process's shards (again: at once)", sig.name)
        stop.set()
        return
    log.warning("%s again: stopping at once; another coordinator takes the shards over", sig.name)
    logging.shutdown()
    os._exit(128 + sig)


_ATTACH = """\
subagent-bus is up: Redis at {url}, namespace {ns}, a coordinator in this terminal.

From other terminals, or other machines that reach this Redis{where}:
  export SUBAGENT_BUS_REDIS_URL={quoted_url} SUBAGENT_BUS_NAMESPACE={quoted_ns}{key}
  subagent-bus adapter watch OUTPUT_FILE --agent-id ID --group GROUP   # a background agent's output file
  subagent-bus adapter run --agent-id ID --group GROUP -- COMMAND ...  # wrap an agent command
  subagent-bus launcher --command 'claude -p {{prompt}}'                 # start approved delegations
  subagent-bus coordinator                                             # more coordinators, any machine
  subagent-bus status --watch        # live view
  subagent-bus inbox                 # what waits for you: answer / resolve / approve / deny / dismiss
"""


@click.command()
@POLICY_OPTION
@HUMAN_KEY_OPTION
@_METRICS_PORT
@click.option(
    "--log-json",
    is_flag=True,
    envvar="SUBAGENT_BUS_LOG_JSON",
    cls=EnvOption,
    help="Log one JSON object per line.",
)
@redis_options
def up(
    settings: Settings, policy: Policy, human_key: bytes | None, metrics_port: int | None, log_json: bool
) -> None:
    """Start everything a single machine needs: Redis (embedded unless --redis-url) and a coordinator.

    Prints the URL and the commands that attach adapters from other terminals or machines, then runs
    the coordinator in the foreground until Ctrl-C (or SIGTERM, or SIGHUP: its terminal closed), which
    stops it as it stops `subagent-bus coordinator`.
    """
    # "is up" once it is: the server answered, the namespace has the shards asked for, metrics are served
    _serve(
        settings,
        policy,
        CoordinatorOptions(human_key=human_key),
        burst=False,
        metrics_at=(metrics_port, "127.0.0.1"),
        logs=(log_json, "INFO"),
        ready=_attach(
            settings,
            local=click.get_current_context().params.get("redis_url") is None,
            keyed=human_key is not None,
        ),
    )


def _attach(settings: Settings, *, local: bool, keyed: bool) -> str:
    """What ``up`` prints once it is up: the password of a URL given shown as ``***`` (terminals are
    logged and shared), so the export line says to put it back; with a human key, that every coordinator
    and person needs it (a coordinator without it applies forged human commands on its shards)."""
    url = settings.display_url()
    if local:
        where = (
            " (the local one in ./.subagent-bus/ listens on 127.0.0.1 only, and comes back on another port "
            "after `subagent-bus down` only when that one was taken meanwhile)"
        )
    elif url != settings.url:
        where = " (put the password in place of ***)"
    else:
        where = ""
    key = (
        f"\n  export {KEY_FILE_ENV}=KEY_FILE  # the key given to up: for every coordinator and person's "
        "command, never an agent"
        if keyed
        else ""
    )
    # quoted for the shell: a URL's options hold `&` and `?`, which would end or glob the line pasted
    return _ATTACH.format(
        url=url,
        quoted_url=shlex.quote(url),
        ns=settings.namespace,
        quoted_ns=shlex.quote(settings.namespace),
        where=where,
        key=key,
    )


commands: list[click.Command] = [
    demo,
    up,
    run_coordinator,
    *view_commands,
    *findings_commands,
    *human_commands,
]
