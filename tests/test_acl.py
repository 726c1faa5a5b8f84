"""The ACL roles on a real server: installed with `subagent-bus acl --apply`, used by the real components.

Every denial is the server's NOPERM. Besides the hand-picked cases, ``ACL DRYRUN`` sweeps run every command
the server knows against each role: no command reaches another namespace, none without keys goes beyond
a short list, none can remove a finding, and each role can run what it needs on the keys it needs.
"""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
import redis
from click.testing import CliRunner

from agents.adapter import AgentBus
from agents.inbox_listener import InboxListener
from agents.launcher import GROUP as LAUNCHERS
from agents.watched_file import checkpoint_key, named
from bus.acl import Role, acl, password_hash
from bus.connection import Client, connect
from bus.consumer import Ack, Consumer
from bus.directives import BlockerResolved, HumanDismiss, LaunchReason, LaunchRequest
from bus.embedded import RedisProcess
from bus.envelope import Payload, decode, encode, new_envelope
from bus.errors import CommandFailed, ConfigError, NamespaceMissing
from bus.events import Tick
from bus.findings import Finding
from bus.keys import Keys, StreamKind, open_namespace
from bus.metrics import Metrics
from bus.publisher import Publisher
from bus.retention import trim_namespace
from bus.settings import MAX_SHARDS, Settings
from bus.signals import (
    BlockerType,
    ClarificationNeeded,
    CompletionReport,
    CompletionStatus,
    Progress,
    Question,
    StopReason,
    StopWork,
)
from coordinator.policy import Policy
from coordinator.rules import summarize
from coordinator.service import TICK_GROUP, Coordinator, CoordinatorOptions
from coordinator.view import iter_findings, load_groups

CLI = str(Path(sys.executable).parent / "subagent-bus")
NS = "team"
KEYS = Keys(NS, 2)
PASSWORDS = {role: f"{role.value}-pw-{i}x7Qz" for i, role in enumerate(Role)}
# Namespaces whose names share a prefix with NS: the patterns must not reach them.
OTHERS = ("teamx", "team.b", "team-2", "tea")
S0 = KEYS.stream(0, StreamKind.SIGNALS)
F0 = KEYS.stream(0, StreamKind.FINDINGS)
T0 = KEYS.stream(0, StreamKind.TASKS)
D0 = KEYS.stream(0, StreamKind.DEAD)
E0 = KEYS.stream(0, StreamKind.EVENTS)
S1 = KEYS.stream(1, StreamKind.SIGNALS)
S_LAST = Keys(NS, MAX_SHARDS).stream(MAX_SHARDS - 1, StreamKind.SIGNALS)  # 5 digits: {team:16383}
INBOX = KEYS.inbox(0, "agent-1")
ODD_INBOX = KEYS.inbox(0, "x}:signals")  # an inbox whose name ends like a signals stream
NOT_A_SHARD = f"{{{NS}}}:signals"
META = KEYS.meta
LEASE = KEYS.state(0, "lease")
GROUP_KEY = KEYS.state(0, "group:g")
ANYWHERE = [("FLUSHALL",), ("FLUSHDB",), ("KEYS", "*"), ("SCAN", "0"), ("RANDOMKEY",), ("CONFIG", "GET", "*"),
            ("ACL", "LIST"), ("SELECT", "1"), ("PUBLISH", "ch", "x"), ("CLIENT", "LIST"), ("FUNCTION", "FLUSH"),
            ("SCRIPT", "FLUSH"), ("CLIENT", "TRACKING", "on", "BCAST")]  # fmt: skip


def other_keys() -> list[str]:
    """A key of every kind in each of the other namespaces (all strings: the sweeps only need names)."""
    keys = []
    for ns in OTHERS:
        other = Keys(ns, 2)
        keys += [other.stream(1, kind) for kind in StreamKind]
        keys += [other.meta, other.inbox(0, "agent-1"), f"{ns}:coordinators"]
        keys += [
            other.state(0, name) for name in ("lease", "offset:agent-1:x", "group:g", "seen:g", "groups")
        ]
    return keys


@dataclass(frozen=True)
class AclServer:
    server: RedisProcess

    def url(self, role: Role) -> str:
        return f"redis://{NS}-{role.value}:{PASSWORDS[role]}@127.0.0.1:{self.server.port}/0"

    def sync(self, role: Role) -> redis.Redis:
        return redis.Redis.from_url(self.url(role))

    async def client(self, role: Role) -> Client:
        return await connect(Settings.from_url(self.url(role), namespace=NS))


def install(url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **{f"PW_{role.name}": pw for role, pw in PASSWORDS.items()}}
    specs = [f"--password-env={role.value}=PW_{role.name}" for role in Role]
    return subprocess.run([CLI, "acl", "--namespace", NS, *specs, "--apply", "--redis-url", url, *extra],
                          env=env, capture_output=True, text=True, timeout=60, check=False)  # fmt: skip


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    server = RedisProcess(tmp_path_factory.mktemp("acl"))
    server.start()
    done = install(server.url)
    assert done.returncode == 0, done.stderr
    assert [line.split()[2] for line in done.stdout.splitlines()] == [f"{NS}-{role.value}" for role in Role]
    assert not any(pw in done.stdout + done.stderr for pw in PASSWORDS.values())
    yield server
    server.stop()


@pytest.fixture
def bus(acl_server: RedisProcess) -> Iterator[AclServer]:
    admin = acl_server.client()
    admin.flushall()
    admin.set(META, "2")
    for key in other_keys():
        admin.set(key, "theirs")
    admin.xadd(F0, {"data": "a finding"})
    admin.close()
    yield AclServer(acl_server)


def run(client: redis.Redis, *args: Any) -> Any:
    return client.execute_command(*args)  # type: ignore[no-untyped-call]


def entries(client: redis.Redis, key: str) -> list[tuple[bytes, dict[bytes, bytes]]]:
    return cast(list[tuple[bytes, dict[bytes, bytes]]], client.xrange(key))


def denied(client: redis.Redis, *args: Any) -> None:
    with pytest.raises(redis.exceptions.NoPermissionError, match=r"(?i)no permissions"):
        run(client, *args)


def script_denied(client: redis.Redis, script: str, *keys: str) -> None:
    with pytest.raises(redis.exceptions.ResponseError, match=r"(?i)acl failure in script|no permissions"):
        client.eval(script, len(keys), *keys)


class Applied(Metrics):
    """Metrics that also tell when the coordinator has committed an envelope of one type."""

    def __init__(self, type_: str) -> None:
        super().__init__("coordinator")
        self.type = type_
        self.event = asyncio.Event()

    def read(self, type_: str, count: int = 1) -> None:
        super().read(type_, count)
        if type_ == self.type:
            self.event.set()


def progress(agent: str, group: str, percent: float) -> Any:
    return new_envelope(Progress(agent_id=agent, percent=percent), agent_id=agent, group_id=group, source="t")


# -- what each role can do -------------------------------------------------------------------------------


async def test_adapter_publishes_keeps_its_checkpoint_and_follows_its_inbox(bus: AclServer) -> None:
    client = await bus.client(Role.ADAPTER)
    try:
        agent = AgentBus(client, KEYS, "agent-1", "g", log=lambda _: None)
        checkpoint = agent.state_key("offset:agent-1:abc")
        await agent.publish([progress("agent-1", "g", 10)], state={checkpoint: b"42"})
        assert await client.get(checkpoint) == b"42"
        admin = bus.server.client()
        [(_, fields)] = entries(admin, agent.signals)
        assert decode(fields[b"data"]).payload == Progress(agent_id="agent-1", percent=10)
        directive = new_envelope(BlockerResolved(issue="x", resolution="y"), agent_id="agent-1", group_id="g")
        admin.xadd(agent.inbox, {"data": encode(directive)})
        admin.xadd(agent.inbox, {"data": b"not json"})
        inbox = Consumer(client, agent.inbox, "adapter", "agent-1")
        await inbox.ensure_group()
        first, junk = await inbox.read()
        assert first.envelope == directive and junk.error
        await inbox.settle([(first, Ack.ACK, None), (junk, Ack.DEAD, None)])
        assert await inbox.pending_count() == 0
        [(_, dead)] = entries(admin, KEYS.stream(agent.shard, StreamKind.DEAD))
        assert dead[b"data"] == b"not json"
        # a listener that died holding a directive: the next one takes it over (XCLAIM)
        admin.xadd(agent.inbox, {"data": encode(directive)})
        admin.xreadgroup("adapter", "listen", {agent.inbox: ">"})
        received = await InboxListener(client, agent.inbox, claim_idle_ms=1).next(5)
        assert received is not None and received.directive.envelope == directive
        admin.close()
    finally:
        await client.aclose()


async def test_an_adapter_names_a_file_reached_through_a_link(bus: AclServer, tmp_path: Path) -> None:
    # named() looks for a checkpoint under both names, with the commands the adapter role may run
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    client = await bus.client(Role.ADAPTER)
    try:
        agent = AgentBus(client, KEYS, "agent-1", "g", log=lambda _: None)
        path = await named(agent, tmp_path / "link" / "out.log", lambda p: checkpoint_key(agent, p))
        assert path == (tmp_path / "real" / "out.log").resolve()
    finally:
        await client.aclose()


def test_adapter_cannot_read_destroy_or_reach_beyond(bus: AclServer) -> None:
    c = bus.sync(Role.ADAPTER)
    for args in [("XDEL", F0, "0-1"), ("XTRIM", F0, "MAXLEN", "0"), ("DEL", F0), ("UNLINK", F0), ("SET", F0, "x"),
                 ("XRANGE", F0, "-", "+"), ("XADD", F0, "*", "data", "x"), ("XRANGE", S0, "-", "+"),
                 ("XREAD", "STREAMS", S0, "0"), ("XDEL", S0, "0-1"), ("DEL", S0), ("XADD", INBOX, "*", "data", "forged"),
                 ("XADD", T0, "*", "data", "forged"), ("XRANGE", D0, "-", "+"), ("SET", META, "99"), ("GET", LEASE),
                 ("SET", LEASE, "mine"), ("HGETALL", GROUP_KEY), ("EVAL", "return 1", "0"), *ANYWHERE]:  # fmt: skip
        denied(c, *args)
    for key in other_keys():
        denied(c, "GET", key)
        denied(c, "SET", key, "x")
        denied(c, "XADD", key, "*", "data", "x")
    assert c.get(META) == b"2"
    admin = bus.server.client()
    assert admin.xlen(F0) == 1 and admin.dbsize() == 2 + len(other_keys())
    assert all(admin.get(key) == b"theirs" for key in other_keys())
    c.close()
    admin.close()


async def test_coordinator_runs_end_to_end_on_its_own_permissions(bus: AclServer) -> None:
    adapter = await bus.client(Role.ADAPTER)
    coord = await bus.client(Role.COORDINATOR)
    observer = await bus.client(Role.OBSERVER)
    try:
        agent = AgentBus(adapter, KEYS, "agent-1", "g", log=lambda _: None)
        finding = Finding(id="SEC-1", title="Hardcoded secret", file="a.py", line=3, agent="agent-1")
        await agent.publish(
            [progress("agent-1", "g", 40), new_envelope(finding, agent_id="agent-1", group_id="g")]
        )
        keys = await open_namespace(coord, NS, 2)
        # a burst run waits out the lease of a coordinator that died (PTTL says how long it has left)
        admin = bus.server.client()
        admin.set(keys.state(keys.shard_of("g"), "lease"), "dead:0", px=200)
        admin.close()
        assert await Coordinator(coord, keys, Policy(), CoordinatorOptions()).run(burst=True) == 2
        [group] = [summarize(s) for s in await load_groups(observer, KEYS)]
        assert [(a.agent_id, a.percent, a.applied) for a in group.agents] == [("agent-1", 40, 2)]
        assert [f.title async for _, f, _, _ in iter_findings(observer, KEYS)] == ["Hardcoded secret"]

        # The long-running loop: membership script, ticks, leases, then a commit of a new signal.
        applied = Applied("PROGRESS")
        options = CoordinatorOptions(tick_interval_s=0.05, block_ms=50)
        service = Coordinator(coord, keys, Policy(), options, metrics=applied)
        stop = asyncio.Event()
        task = asyncio.create_task(service.run(stop=stop))
        await agent.publish([progress("agent-1", "g", 80)])
        await asyncio.wait_for(applied.event.wait(), 20)
        stop.set()
        await asyncio.wait_for(task, 20)
        [group] = [summarize(s) for s in await load_groups(observer, KEYS)]
        assert group.agents[0].percent == 80

        # A finished group, quiet for a week, is retired: its state deleted in the tick's commit.
        done = CompletionReport(agent_id="agent-1", status=CompletionStatus.SUCCESS, summary="Done.")
        await agent.publish([new_envelope(done, agent_id="agent-1", group_id="g")])
        later = datetime.now(UTC) + timedelta(days=8)  # the server's clock, and the tick's entry id
        tick = new_envelope(Tick(now=later), agent_id="test", group_id=TICK_GROUP, source="tick")
        signals = keys.stream(keys.shard_of("g"), StreamKind.SIGNALS)
        await coord.xadd(signals, {"data": encode(tick)}, id=f"{round(later.timestamp() * 1000)}-*")
        retiring = Policy(retire_after_seconds=7 * 86_400)
        assert await Coordinator(coord, keys, retiring, CoordinatorOptions()).run(burst=True) == 2
        assert await load_groups(observer, KEYS) == []

        # Retention of signals/events/tasks is allowed; the findings stream is append-only even for it.
        await trim_namespace(coord, keys, maxlen_signals=None, maxlen_events=None)
        await trim_namespace(coord, keys, maxlen_signals=1, maxlen_events=1)  # the walk back to the cut
        with pytest.raises(CommandFailed, match=r"(?i)no permissions|acl failure"):
            await trim_namespace(
                coord, keys, maxlen_signals=None, maxlen_events=None, maxlen_findings=0, include_findings=True
            )
    finally:
        for client in (adapter, coord, observer):
            await client.aclose()


async def test_an_adapter_before_any_coordinator_is_told_to_start_one(bus: AclServer) -> None:
    admin = bus.server.client()
    admin.delete(META)  # no coordinator has created the namespace yet
    admin.close()
    client = await bus.client(Role.ADAPTER)
    try:
        with pytest.raises(
            NamespaceMissing, match="may not create it: under ACLs only the coordinator role's"
        ):
            await open_namespace(client, NS)
    finally:
        await client.aclose()


def test_coordinator_has_no_admin_command_and_no_other_namespace(bus: AclServer) -> None:
    c = bus.sync(Role.COORDINATOR)
    for args in [*ANYWHERE, ("CONFIG", "SET", "maxmemory", "1"), ("ACL", "SETUSER", "x"), ("SWAPDB", "0", "1"),
                 ("XDEL", F0, "0-1"), ("XTRIM", F0, "MAXLEN", "0"), ("DEL", F0), ("UNLINK", F0), ("SET", F0, "x"),
                 ("PEXPIRE", F0, "1"), ("RENAME", F0, "{team:0}:x"), ("XGROUP", "DESTROY", S0, "coordinator"),
                 ("XSETID", F0, "0-1"), ("DEL", S0), ("DEL", META)]:  # fmt: skip
        denied(c, *args)
    script_denied(c, "return redis.call('XDEL', KEYS[1], '0-1')", F0)
    script_denied(c, "return redis.call('DEL', KEYS[1])", F0)
    for key in other_keys():
        denied(c, "EXISTS", key)
        denied(c, "EVAL", "return 1", "1", key)
        denied(c, "XADD", key, "*", "data", "x")
    admin = bus.server.client()
    assert admin.xlen(F0) == 1
    admin.close()
    c.close()


def test_observer_reads_with_cursors_and_writes_nothing(bus: AclServer) -> None:
    admin = bus.server.client()
    admin.xadd(S0, {"data": "x"})
    admin.xgroup_create(S0, "coordinator", id="0")
    admin.hset(GROUP_KEY, "meta", "{}")
    c = bus.sync(Role.OBSERVER)
    assert len(entries(c, S0)) == 1 and len(run(c, "XREVRANGE", F0, "+", "-")) == 1
    assert run(c, "XREAD", "STREAMS", S0, "0")[0][1][0][1] == {b"data": b"x"}
    assert c.xinfo_stream(S0)["length"] == 1 and c.xpending(S0, "coordinator")["pending"] == 0
    assert c.hgetall(GROUP_KEY) == {b"meta": b"{}"} and c.get(META) == b"2"
    for args in [("XADD", S0, "*", "data", "x"), ("DEL", S0), ("XDEL", S0, "0-1"), ("XTRIM", S0, "MAXLEN", "0"),
                 ("XREADGROUP", "GROUP", "coordinator", "me", "STREAMS", S0, ">"), ("XGROUP", "CREATE", S0, "mine", "0"),
                 ("XACK", S0, "coordinator", "0-1"), ("XAUTOCLAIM", S0, "coordinator", "me", "0", "0"),
                 ("SET", META, "9"), ("HSET", GROUP_KEY, "a", "b"), ("EXPIRE", S0, "1"), ("DBSIZE",),
                 ("EVAL_RO", "return 1", "0"), *ANYWHERE]:  # fmt: skip
        denied(c, *args)
    for key in other_keys():
        denied(c, "TYPE", key)
    assert admin.xlen(S0) == 1 and admin.xinfo_groups(S0)[0]["consumers"] == 0
    c.close()
    admin.close()


async def test_launcher_reads_tasks_with_its_group(bus: AclServer) -> None:
    coord, launcher = await bus.client(Role.COORDINATOR), await bus.client(Role.LAUNCHER)
    try:
        request = LaunchRequest(
            request_id="r1", new_agent_id="agent-2", reason=LaunchReason.DELEGATION, task="t"
        )
        envelope = new_envelope(request, agent_id="agent-2", group_id="g")
        await coord.xadd(T0, {"data": encode(envelope)})
        await coord.xadd(T0, {"data": b"{}"})
        tasks = Consumer(launcher, T0, LAUNCHERS, "launcher-1")
        await tasks.ensure_group()
        good, bad = await tasks.read()
        assert good.envelope == envelope and bad.error
        await tasks.settle([(good, Ack.ACK, None), (bad, Ack.DEAD, None)])
        assert await tasks.pending_count() == 0
    finally:
        await coord.aclose()
        await launcher.aclose()
    c = bus.sync(Role.LAUNCHER)
    for args in [("XADD", T0, "*", "data", "x"), ("XADD", S0, "*", "data", "x"), ("XRANGE", S0, "-", "+"),
                 ("XRANGE", D0, "-", "+"), ("XDEL", T0, "0-1"), ("XTRIM", T0, "MAXLEN", "0"), ("DEL", T0),
                 ("XRANGE", F0, "-", "+"), ("XREADGROUP", "GROUP", "adapter", "x", "STREAMS", INBOX, ">"),
                 ("GET", LEASE), ("SET", META, "9"), *ANYWHERE]:  # fmt: skip
        denied(c, *args)
    c.close()


def test_a_real_adapter_process_publishes_with_adapter_credentials(bus: AclServer) -> None:
    text = "[PROGRESS]\nagent_id: agent-1\npercent: 30\n[/PROGRESS]\n"
    done = subprocess.run([CLI, "adapter", "stdin", "--agent-id", "agent-1", "--group", "g", "--quiet",
                           "--redis-url", bus.url(Role.ADAPTER), "--namespace", NS],
                          input=text, capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    admin = bus.server.client()
    signals = entries(admin, KEYS.stream(KEYS.shard_of("g"), StreamKind.SIGNALS))
    assert "PROGRESS" in [decode(fields[b"data"]).type.value for _, fields in signals]
    admin.close()


def test_a_wrong_password_is_not_waited_out_as_an_outage(bus: AclServer) -> None:
    """`--wait-for-redis` waits for a server that is away, not for a password that is wrong: that adapter
    exits with the reason (a launcher's would otherwise wait for ever, its agent never started)."""
    wrong = bus.url(Role.ADAPTER).replace(PASSWORDS[Role.ADAPTER], "not-the-password")
    done = subprocess.run([CLI, "adapter", "stdin", "--agent-id", "agent-1", "--group", "g", "--quiet",
                           "--wait-for-redis", "--redis-url", wrong, "--namespace", NS],
                          input="", capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 1
    assert "Redis refused the credentials (AuthenticationError): " in done.stderr, done.stderr
    assert "retrying" not in done.stderr


def test_a_wrong_password_says_so_and_no_outage(bus: AclServer) -> None:
    wrong = bus.url(Role.OBSERVER).replace(PASSWORDS[Role.OBSERVER], "not-the-password")
    done = subprocess.run([CLI, "status", "--redis-url", wrong, "--namespace", NS],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 1
    assert "Redis refused the credentials (AuthenticationError): " in done.stderr, done.stderr
    assert "check the user name and password of the URL" in done.stderr and "unavailable" not in done.stderr
    assert "not-the-password" not in done.stderr + done.stdout


def test_tail_follows_as_an_observer(bus: AclServer) -> None:
    envelope = progress("agent-1", "g", 5)
    admin = bus.server.client()
    admin.xadd(S0, {"data": encode(envelope)})
    admin.close()
    done = subprocess.run([CLI, "tail", "--from", "0", "--count", "1", "--json",
                           "--redis-url", bus.url(Role.OBSERVER), "--namespace", NS],
                          capture_output=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert decode(done.stdout.strip()) == envelope


def test_an_adapter_tails_its_inbox_with_a_group_of_its_own(bus: AclServer) -> None:
    """Its user may make and read a group on an inbox, not ask the server where a group is (XINFO):
    where the group starts is not asked then."""
    directive = progress("agent-1", "g", 5)
    inbox = KEYS.inbox(KEYS.shard_of("g"), "agent-1")
    admin = bus.server.client()
    admin.xadd(inbox, {"data": encode(directive)})
    admin.close()
    done = subprocess.run([CLI, "tail", "--stream", "inbox:agent-1", "--group-id", "g", "--group", "mine",
                           "--timeout", "0.5", "--redis-url", bus.url(Role.ADAPTER), "--namespace", NS],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_tail_refused_by_the_acl_says_so_and_no_more(bus: AclServer) -> None:
    done = subprocess.run([CLI, "tail", "--from", "0", "--count", "1",
                           "--redis-url", bus.url(Role.ADAPTER), "--namespace", NS],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 1
    assert "NoPermissionError" in done.stderr and "lost the server" not in done.stderr, done.stderr
    assert "(`subagent-bus acl --help` says what each role may)" in done.stderr


def test_human_reads_everything_and_appends_to_the_signals_streams_only(bus: AclServer) -> None:
    admin = bus.server.client()
    admin.xadd(S0, {"data": "x"})
    admin.xgroup_create(S0, "coordinator", id="0")
    admin.hset(GROUP_KEY, "meta", "{}")
    admin.sadd(KEYS.state(0, "groups"), "g")
    c = bus.sync(Role.HUMAN)
    assert c.get(META) == b"2" and c.hgetall(GROUP_KEY) == {b"meta": b"{}"}
    assert c.sismember(KEYS.state(0, "groups"), "g") and c.smembers(KEYS.state(0, "groups")) == {b"g"}
    assert len(entries(c, S0)) == 1 and run(c, "XREAD", "STREAMS", S0, "0")[0][1][0][1] == {b"data": b"x"}
    assert len(entries(c, F0)) == 1 and c.xpending(S0, "coordinator")["pending"] == 0
    for stream in (S0, S1, S_LAST):
        assert c.xadd(stream, {"data": "human"})
    elsewhere = (F0, T0, D0, E0, INBOX, ODD_INBOX, NOT_A_SHARD, f"{S0}:x")
    for args in [*[("XADD", key, "*", "data", "x") for key in elsewhere],
                 ("XREADGROUP", "GROUP", "coordinator", "me", "STREAMS", S0, ">"), ("XACK", S0, "coordinator", "0-1"),
                 ("XGROUP", "CREATE", S0, "mine", "0"), ("XGROUP", "DELCONSUMER", S0, "coordinator", "me"),
                 ("XAUTOCLAIM", S0, "coordinator", "me", "0", "0"), ("XCLAIM", S0, "coordinator", "me", "0", "0-1"),
                 ("XDEL", S0, "0-1"), ("XTRIM", S0, "MAXLEN", "0"), ("XSETID", S0, "9-9"), ("DEL", S0),
                 ("UNLINK", S0), ("EXPIRE", S0, "1"), ("RENAME", S0, "{team:0}:x"), ("COPY", S0, "{team:0}:x"),
                 ("SET", S0, "x"), ("SET", META, "9"), ("DEL", META), ("SET", LEASE, "mine"),
                 ("HSET", GROUP_KEY, "a", "b"), ("SADD", KEYS.state(0, "groups"), "h"),
                 ("SET", KEYS.state(0, "offset:agent-1:x"), "1"), ("MULTI",), ("EVAL", "return 1", "0"),
                 ("EVAL_RO", "return 1", "0"), ("DBSIZE",), *ANYWHERE]:  # fmt: skip
        denied(c, *args)
    for key in other_keys():
        denied(c, "TYPE", key)
        denied(c, "XADD", key, "*", "data", "x")
    assert admin.xlen(S0) == 2 and admin.xlen(S1) == 1 and admin.xlen(S_LAST) == 1 and admin.xlen(F0) == 1
    assert admin.xinfo_groups(S0)[0]["consumers"] == 0 and admin.get(META) == b"2"
    assert not admin.exists(*elsewhere[1:], LEASE)
    c.close()
    admin.close()


async def _ask_and_block(bus: AclServer) -> None:
    """The coordinator user creates the namespace; one agent asks a question, another is blocked, a third
    reports a finding; the coordinator commits it all."""
    coord, adapter = await bus.client(Role.COORDINATOR), await bus.client(Role.ADAPTER)
    try:
        keys = await open_namespace(coord, NS, 2)
        question = Question(question_id="Q1", text="OAuth2 or JWT?")
        signals: dict[str, Payload] = {
            "asker": ClarificationNeeded(agent_id="asker", blocked_at="a", reason="b", questions=[question]),
            "blocked": StopWork(
                agent_id="blocked",
                stop_reason=StopReason.BLOCKER,
                blocker_type=BlockerType.ERROR,
                details="c",
            ),
            "finder": Finding(id="SEC-1", title="Hardcoded secret", file="a.py", line=3, agent="finder"),
        }
        for agent_id, payload in signals.items():
            agent = AgentBus(adapter, keys, agent_id, "g", log=lambda _: None)
            await agent.publish([new_envelope(payload, agent_id=agent_id, group_id="g", source="t")])
        assert await Coordinator(coord, keys, Policy(), CoordinatorOptions()).run(burst=True) == 3
    finally:
        await coord.aclose()
        await adapter.aclose()


async def _coordinate(bus: AclServer) -> int:
    coord = await bus.client(Role.COORDINATOR)
    try:
        keys = await open_namespace(coord, NS, 2)
        return await Coordinator(coord, keys, Policy(), CoordinatorOptions()).run(burst=True)
    finally:
        await coord.aclose()


def test_the_human_commands_run_as_the_human_user(bus: AclServer, tmp_path: Path) -> None:
    admin = bus.server.client()
    admin.delete(META)
    asyncio.run(_ask_and_block(bus))
    signals = KEYS.stream(KEYS.shard_of("g"), StreamKind.SIGNALS)
    published = admin.xlen(signals)

    def cli(role: Role, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([CLI, *args, "--redis-url", bus.url(role), "--namespace", NS], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip

    def human(*args: str) -> str:
        done = cli(Role.HUMAN, *args)
        assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
        return done.stdout

    [group] = orjson.loads(human("status", "--json"))
    assert group["group_id"] == "g"
    assert {a["agent_id"] for a in group["agents"]} == {"asker", "blocked", "finder"}
    waiting = orjson.loads(human("inbox", "--json"))
    assert [q["question_id"] for q in waiting["questions"]] == ["Q1"]
    assert [b["agent_id"] for b in waiting["blockers"]] == ["blocked"]
    assert [f["title"] for f in orjson.loads(human("findings", "--json"))] == ["Hardcoded secret"]
    assert "1 merged finding recomputed for group 'g'" in human("replay", "--group", "g")
    shown = human("tail", "--stream", "signals", "--from", "0", "--count", str(published), "--json")
    assert len(shown.splitlines()) == published

    # The observer reads the same state but may not publish: the grant the human role adds is the one used.
    refused = cli(Role.OBSERVER, "answer", "asker", "Q1=JWT")
    assert refused.returncode == 1 and "no permissions" in refused.stderr.lower(), refused.stderr
    assert admin.xlen(signals) == published
    assert "queued answer" in human("answer", "asker", "Q1=JWT")
    assert "queued resolve" in human("resolve", "blocked", "--resolution", "installed")
    not_escalated = cli(Role.HUMAN, "dismiss", "asker")  # read, checked and refused by the rules, not by ACL
    assert not_escalated.returncode == 1 and "no permissions" not in not_escalated.stderr.lower()
    human_types = [decode(fields[b"data"]).type.value for _, fields in entries(admin, signals)[published:]]
    assert human_types == ["ANSWER", "RESOLVE"]

    assert asyncio.run(_coordinate(bus)) == 2
    shard = KEYS.shard_of("g")
    inbox = {
        a: [decode(f[b"data"]).type for _, f in entries(admin, KEYS.inbox(shard, a))]
        for a in ("asker", "blocked")
    }
    assert inbox == {"asker": ["CLARIFICATION_RESPONSE"], "blocked": ["BLOCKER_RESOLVED"]}
    assert orjson.loads(human("inbox", "--json"))["questions"] == []
    admin.close()


async def test_human_publishes_but_cannot_reach_the_streams_the_coordinator_writes(bus: AclServer) -> None:
    """The human envelope goes where the publisher puts it; the same publisher aimed at any other stream
    kind (what the coordinator or an adapter writes) is refused."""
    client = await bus.client(Role.HUMAN)
    try:
        keys = await open_namespace(client, NS, create=False)
        publisher = Publisher(client, keys)
        envelope = new_envelope(HumanDismiss(note="mine"), agent_id="agent-1", group_id="g", source="dismiss")
        await publisher.publish(envelope)
        for kind in (StreamKind.FINDINGS, StreamKind.TASKS, StreamKind.EVENTS, StreamKind.DEAD):
            with pytest.raises(CommandFailed, match=r"(?i)no permissions"):
                await publisher.publish(envelope, kind)
        with pytest.raises(CommandFailed, match=r"(?i)no permissions"):
            await publisher.send_directive(envelope)
        with pytest.raises(CommandFailed, match=r"(?i)no permissions"):
            await Publisher(client, Keys("teamx", 2)).publish(envelope)
    finally:
        await client.aclose()
    admin = bus.server.client()
    [(_, fields)] = entries(admin, keys.stream(keys.shard_of("g"), StreamKind.SIGNALS))
    assert decode(fields[b"data"]) == envelope
    others = [
        keys.stream(s, k) for s in range(2) for k in (StreamKind.TASKS, StreamKind.EVENTS, StreamKind.DEAD)
    ]
    assert admin.xlen(F0) == 1 and not admin.exists(*others)
    admin.close()


# -- sweeps over every command the server knows ----------------------------------------------------------


@dataclass(frozen=True)
class Command:
    name: str
    arity: int
    flags: frozenset[str]
    keyed: bool

    def argv(self, filler: str) -> list[str]:
        words = self.name.split("|")
        return words + [filler] * (abs(self.arity) - len(words))


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def commands(client: redis.Redis) -> list[Command]:
    """Every command and subcommand the server knows (containers like CLIENT only as subcommands)."""
    out = []
    for name, info in client.command().items():
        subs = info.get("subcommands") or []
        for sub in subs:
            flags = frozenset(map(text, sub[2]))
            out.append(Command(text(sub[0]), int(sub[1]), flags, bool(sub[8]) or "movablekeys" in flags))
        if not subs:
            flags = frozenset(map(text, info["flags"]))
            keyed = bool(info["key_specifications"]) or "movablekeys" in flags
            out.append(Command(text(name), int(info["arity"]), flags, keyed))
    return out


def allowed(admin: redis.Redis, role: Role, argv: list[str]) -> bool | None:
    try:
        reply = run(admin, "ACL", "DRYRUN", f"{NS}-{role.value}", *argv)
    except redis.exceptions.ResponseError:
        return None  # arguments the server rejects before any permission check
    return reply in (b"OK", "OK")


@functools.cache
def keys_of(admin: redis.Redis, argv: tuple[str, ...]) -> tuple[bytes, ...]:
    """The keys the server finds in ``argv`` (none when it rejects the arguments); cached per server."""
    try:
        return tuple(run(admin, "COMMAND GETKEYS", *argv))
    except redis.exceptions.ResponseError:
        return ()


BASE = {"auth", "hello", "ping", "echo", "quit", "reset", "readonly", "readwrite", "asking", "wait", "waitaof",
        "command", "command|count", "command|docs", "command|getkeys", "command|getkeysandflags", "command|help",
        "command|info", "command|list", "client|caching", "client|capa", "client|getname", "client|getredir",
        "client|help", "client|id", "client|import-source", "client|info", "client|no-touch", "client|reply",
        "client|setinfo", "client|setname", "client|trackinginfo", "info", "cluster|slots", "cluster|shards"}  # fmt: skip
KEYLESS = {
    Role.ADAPTER: BASE | {"multi", "exec", "discard"},
    Role.LAUNCHER: BASE | {"multi", "exec", "discard", "time"},
    Role.COORDINATOR: BASE | {"time", "script|load", "script|exists"},
    Role.OBSERVER: BASE | {"lolwut", "time"},
    Role.HUMAN: BASE | {"lolwut", "time"},
}


@pytest.fixture(scope="module")
def table(acl_server: RedisProcess) -> Iterator[tuple[redis.Redis, list[Command]]]:
    admin = acl_server.client()
    yield admin, commands(admin)
    admin.close()


@pytest.mark.parametrize("role", list(Role))
def test_no_role_runs_a_keyless_command_beyond_its_list(
    table: tuple[redis.Redis, list[Command]], role: Role
) -> None:
    admin, cmds = table
    keyless = [c for c in cmds if not c.keyed]
    assert len(keyless) > 100
    granted = {c.name for c in keyless if allowed(admin, role, c.argv("x"))}
    assert granted <= KEYLESS[role], sorted(granted - KEYLESS[role])
    assert {"ping", "hello", "info"} <= granted


@pytest.mark.parametrize("role", list(Role))
def test_no_command_reaches_another_namespace(table: tuple[redis.Redis, list[Command]], role: Role) -> None:
    admin, cmds = table
    checked = 0
    for key in other_keys():
        for command in (c for c in cmds if c.keyed):
            argv = command.argv(key)
            if keys_of(admin, tuple(argv)):
                checked += 1
                assert not allowed(admin, role, argv), (role, argv)
    assert checked > 150 * len(other_keys())


# What each role may run on a key, at most (a role may run fewer).
MAY: dict[Role, dict[str, set[str]]] = {
    Role.ADAPTER: {F0: set(), T0: set(), LEASE: set(), META: {"get"}, S0: {"xadd"}, D0: {"xadd"},
                   INBOX: {"xgroup|create", "xreadgroup", "xautoclaim", "xclaim", "xpending", "xack"}},
    Role.LAUNCHER: {F0: set(), S0: set(), INBOX: set(), LEASE: set(), META: {"get"}, D0: {"xadd"},
                    T0: {"xgroup|create", "xreadgroup", "xautoclaim", "xclaim", "xpending", "xack"}},
}  # fmt: skip
COORDINATOR_FINDINGS_WRITES = {"xadd", "xack", "xautoclaim", "xgroup|create", "xreadgroup", "eval", "evalsha"}
READ_ONLY: dict[str, set[str]] = {F0: set(), S0: set(), META: set(), LEASE: set(), GROUP_KEY: set()}
# The roles that read: the commands with the write flag each may run on a key, at most.
WRITES: dict[Role, dict[str, set[str]]] = {
    Role.COORDINATOR: {F0: COORDINATOR_FINDINGS_WRITES},
    Role.OBSERVER: READ_ONLY,
    Role.HUMAN: {**READ_ONLY, T0: set(), D0: set(), E0: set(), INBOX: set(), ODD_INBOX: set(), NOT_A_SHARD: set(),
                 f"{S0}:x": set(), S0: {"xadd"}, S1: {"xadd"}, S_LAST: {"xadd"}},
}  # fmt: skip
READS = {F0: {"xrange", "xrevrange"}, S0: {"xrange", "xinfo|stream"}, META: {"get"}, GROUP_KEY: {"hgetall"}}
# What each role must be able to run on a key (the limits above hold for a role that may run nothing). XREADGROUP
# is left out: its keys follow STREAMS, which the sweep's argument lists do not have.
GROUP_READER = {"xgroup|create", "xautoclaim", "xclaim", "xpending", "xack"}
MUST: dict[Role, dict[str, set[str]]] = {
    Role.ADAPTER: {S0: {"xadd"}, D0: {"xadd"}, META: {"get"}, INBOX: GROUP_READER},
    Role.LAUNCHER: {D0: {"xadd"}, META: {"get"}, T0: GROUP_READER},
    Role.OBSERVER: READS,
    Role.HUMAN: {**READS, S0: READS[S0] | {"xadd"}, S1: {"xadd"}, S_LAST: {"xadd"},
                 KEYS.state(0, "groups"): {"sismember", "smembers"}},
    Role.COORDINATOR: {F0: {"xadd", "xrange"}, S0: {"xack", "xtrim"}, META: {"get", "set"}, LEASE: {"pttl"}},
}  # fmt: skip


@pytest.mark.parametrize("role", list(Role))
def test_what_a_role_may_run_on_each_key(table: tuple[redis.Redis, list[Command]], role: Role) -> None:
    admin, cmds = table

    def runs(key: str) -> dict[str, Command]:
        return {
            c.name: c
            for c in cmds
            if c.keyed and keys_of(admin, tuple(c.argv(key))) and allowed(admin, role, c.argv(key))
        }

    for key, limit in MAY.get(role, {}).items():
        assert set(runs(key)) <= limit, (role, key, sorted(set(runs(key)) - limit))
    for key, limit in WRITES.get(role, {}).items():
        writes = {name for name, c in runs(key).items() if "write" in c.flags}
        assert writes <= limit, (role, key, sorted(writes - limit))
    for key, needed in MUST[role].items():
        assert needed <= set(runs(key)), (role, key, sorted(needed - set(runs(key))))


# -- the command line ------------------------------------------------------------------------------------


def test_passwords_are_required_distinct_and_never_printed() -> None:
    runner = CliRunner()
    assert runner.invoke(acl, []).exit_code == 2
    both = runner.invoke(acl, ["--generate", "--password-env", "X"])
    assert both.exit_code == 2 and "give --password-env or --generate, not both" in both.output
    several = runner.invoke(acl, ["--password-env", "X"], env={"X": "secret-1"})
    assert several.exit_code == 2 and "ROLE=VAR" in several.output
    same = runner.invoke(acl, ["--role", "adapter", "--role", "observer", "--password-env", "adapter=X",
                               "--password-env", "observer=X"], env={"X": "secret-1"})  # fmt: skip
    assert same.exit_code == 2 and "same password" in same.output
    assert runner.invoke(acl, ["--role", "adapter", "--password-env", "UNSET_VAR_42"]).exit_code == 2
    assert runner.invoke(acl, ["--namespace", "a:b", "--generate"]).exit_code == 2
    long = runner.invoke(acl, ["--namespace", "x" * 65, "--generate"])  # one no other command takes
    assert long.exit_code == 2 and "has more than 64 characters" in long.output
    one = runner.invoke(acl, ["--role", "observer", "--password-env", "X"], env={"X": "secret-1"})
    assert one.exit_code == 0 and "secret-1" not in one.output
    assert (
        one.output
        == f"ACL SETUSER sbus-observer reset on {password_hash('secret-1')} " + one.output.split(" ", 6)[6]
    )

    generated = CliRunner().invoke(acl, ["--generate", "--format", "aclfile", "--user-prefix", "p"])
    assert generated.exit_code == 0, generated.output
    lines = generated.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [["user", f"p-{r.value}"] for r in Role]
    secrets_ = [line.rsplit(": ", 1)[1] for line in generated.stderr.splitlines()]
    assert len(set(secrets_)) == len(Role)
    assert all(
        password_hash(s) in line and s not in generated.stdout
        for s, line in zip(secrets_, lines, strict=True)
    )


def test_the_aclfile_output_loads_into_a_server(tmp_path: Path) -> None:
    done = CliRunner().invoke(acl, ["--namespace", NS, "--generate", "--format", "aclfile"])
    (tmp_path / "users.acl").write_text(done.stdout)
    password = dict(line.removeprefix("password of ").split(": ") for line in done.stderr.splitlines())
    server = RedisProcess(tmp_path / "redis", config={"aclfile": str(tmp_path / "users.acl")})
    server.start()
    try:
        user = f"{NS}-adapter"
        adapter = redis.Redis(port=server.port, username=user, password=password[user])
        assert adapter.xadd(S0, {"data": "x"})
        denied(adapter, "XRANGE", S0, "-", "+")
        adapter.close()
    finally:
        server.stop()


def test_apply_as_a_user_without_acl_rights_says_it_needs_an_administrator(acl_server: RedisProcess) -> None:
    admin = acl_server.client()
    admin.acl_setuser("weak", enabled=True, passwords=["+weak-pw"], keys=["*"], commands=["+@all", "-acl"])
    admin.close()
    done = install(f"redis://weak:weak-pw@127.0.0.1:{acl_server.port}/0")
    assert (
        done.returncode == 1
        and "refused" in done.stderr
        and "--apply needs an administrator's URL" in done.stderr
    )


def test_apply_that_fails_prints_no_generated_password(acl_server: RedisProcess) -> None:
    admin = acl_server.client()
    admin.acl_setuser("weak", enabled=True, passwords=["+weak-pw"], keys=["*"], commands=["+@all", "-acl"])
    admin.close()
    url = f"redis://weak:weak-pw@127.0.0.1:{acl_server.port}/0"
    done = CliRunner().invoke(acl, ["--namespace", NS, "--generate", "--apply", "--redis-url", url])
    assert done.exit_code == 1 and "refused" in done.stderr
    assert "password of" not in done.stderr and done.stdout == ""


@pytest.mark.cluster
def test_roles_on_a_cluster(cluster_url: str) -> None:
    done = install(cluster_url)
    assert done.returncode == 0, done.stderr
    port = cluster_url.rsplit(":", 1)[1].split("/", maxsplit=1)[0]

    async def scenario() -> list[Any]:
        urls = {role: f"redis://{NS}-{role.value}:{PASSWORDS[role]}@127.0.0.1:{port}/0" for role in Role}
        coord = await connect(Settings.from_url(urls[Role.COORDINATOR]))
        adapter = await connect(Settings.from_url(urls[Role.ADAPTER]))
        observer = await connect(Settings.from_url(urls[Role.OBSERVER]))
        human = await connect(Settings.from_url(urls[Role.HUMAN]))
        try:
            assert isinstance(coord, redis.asyncio.RedisCluster)  # found through INFO, as the role allows
            assert isinstance(human, redis.asyncio.RedisCluster)
            keys = await open_namespace(coord, NS, 4)
            for group in ("g1", "g2", "g3"):
                await AgentBus(adapter, keys, "agent-1", group, log=lambda _: None).publish(
                    [progress("agent-1", group, 10)]
                )
            assert await Coordinator(coord, keys, Policy(), CoordinatorOptions()).run(burst=True) == 3
            # the human user reads the groups and publishes to the signals stream of each one's shard
            assert len({keys.shard_of(group) for group in ("g1", "g2", "g3")}) > 1
            human_keys = await open_namespace(human, NS, create=False)
            for state in await load_groups(human, human_keys):
                envelope = new_envelope(
                    HumanDismiss(), agent_id="agent-1", group_id=state.group_id, source="t"
                )
                await Publisher(human, human_keys).publish(envelope)
            assert await Coordinator(coord, keys, Policy(), CoordinatorOptions()).run(burst=True) == 3
            return await load_groups(observer, keys)
        finally:
            for client in (coord, adapter, observer, human):
                await client.aclose()

    assert [state.group_id for state in asyncio.run(scenario())] == ["g1", "g2", "g3"]


def test_bad_password_specs_and_user_names_say_what_is_wrong() -> None:
    runner = CliRunner()
    env = {"X": "secret-1", "Y": "secret-2"}
    not_a_role = runner.invoke(acl, ["--role", "adapter", "--password-env", "admin=X"], env=env)
    assert not_a_role.exit_code == 2
    assert "'admin' is not a role (adapter, coordinator, launcher, observer, human)" in not_a_role.output
    unnamed = runner.invoke(
        acl, ["--role", "adapter", "--role", "observer", "--password-env", "adapter=X"], env=env
    )
    assert unnamed.exit_code == 2 and "no variable names the observer password" in unnamed.output
    other = runner.invoke(acl, ["--role", "observer", "--password-env", "human=X"], env=env)
    assert (
        other.exit_code == 2 and "human is not among the roles chosen (observer; see --role)" in other.output
    )
    empty = runner.invoke(acl, ["--role", "adapter", "--password-env", "E"], env={"E": ""})
    assert empty.exit_code == 2 and "$E is not set or empty" in empty.output
    spaced = runner.invoke(acl, ["--role", "adapter", "--generate", "--user-prefix", "my team"])
    assert spaced.exit_code == 2 and "'my team-adapter' is not a valid ACL user name" in spaced.output
    for prefix in ("o'q", 'o"q', "o\\q", "o\x1bq"):  # redis-cli refused the line, or a terminal ran it
        quoted = runner.invoke(acl, ["--role", "observer", "--generate", "--user-prefix", prefix])
        assert quoted.exit_code == 2 and "is not a valid ACL user name" in quoted.output, prefix
    blank = runner.invoke(acl, ["--role", "adapter", "--generate", "--user-prefix", ""])
    assert blank.exit_code == 2 and "an empty user prefix" in blank.output
    with pytest.raises(ConfigError, match="must not be empty"):
        password_hash("")


def test_trim_refused_by_the_acl_says_what_it_removed_before_and_who_may(bus: AclServer) -> None:
    admin = bus.server.client()
    for _ in range(3):
        admin.xadd(S0, {"data": "x"})
    admin.xgroup_create(S0, "coordinator", id="$")  # applied: only the bound keeps one
    trim = [CLI, "trim", "--signals", "1", "--redis-url", bus.url(Role.COORDINATOR), "--namespace", NS]
    done = subprocess.run(trim, capture_output=True, text=True, timeout=60, check=False)
    # the inboxes, which it may not SCAN, are looked for first: refused before anything was trimmed
    assert (done.returncode, done.stdout) == (1, "")
    assert (
        "; trim runs as an administrator (`subagent-bus acl --help` says what each role may)" in done.stderr
    )
    assert admin.xlen(S0) == 3
    done = subprocess.run(
        [*trim, "--no-inboxes", "--findings", "0"], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == "signals: 2 entries removed", done.stdout  # said before the refusal
    assert "cannot trim {team:0}:findings" in done.stderr and "No permissions" in done.stderr
    assert admin.xlen(S0) == 1
