"""``subagent-bus mcp`` driven over stdio by the SDK's client, against a real Redis.

Every tool publishes the envelope an adapter publishes for the same signal printed as text: same type,
kind, agent, group and payload. Ids differ (the text path derives them from byte offsets in the output,
a tool call has none) and so do ``source`` and ``ts`` (the moment of publishing).
"""

from __future__ import annotations

import asyncio
import subprocess
from importlib.metadata import version
from pathlib import Path
from typing import Any

import orjson
import yaml
from adapter_kit import CLI, Bus, open_bus, wait_until
from mcp.client import ClientSession
from mcp.client.client import Client
from mcp.client.stdio import stdio_client
from mcp_kit import AGENT, GROUP_ID, call, server, session, text_of

from agents.adapter import AgentBus, OutputStream
from agents.findings_import import parse_findings
from bus.directives import AnswerItem, ClarificationResponse
from bus.embedded import RedisProcess
from bus.envelope import Envelope, EnvelopeType, new_envelope
from bus.keys import ConsumerGroup, StreamKind
from bus.publisher import Publisher
from bus.results import ResultReport, ResultStatus

TS = "2026-01-11T08:45:00-05:00"

SIGNALS: dict[str, tuple[EnvelopeType, dict[str, Any]]] = {
    "request_clarification": (
        EnvelopeType.CLARIFICATION_NEEDED,
        {
            "timestamp": TS,
            "blocked_at": "Analyzing authentication patterns in src/auth/",
            "reason": "Multiple authentication strategies found",
            "questions": [
                {"question_id": "Q1", "text": "OAuth2, JWT, or both?", "context": "Both exist"},
                {"question_id": "Q2", "text": "Framework 2.0 or 3.0?"},
            ],
            "can_resume_with": "Which strategies to analyze",
            "current_state": "Secret scan done",
        },
    ),
    "stop_work": (
        EnvelopeType.STOP_WORK,
        {
            "timestamp": TS,
            "stop_reason": "blocker",
            "blocker_type": "external_dependency",
            "details": "npm audit needs node_modules",
            "completed_work": "✓ Scanned for secrets\n✓ Analyzed SQL\n",
            "resume_requirements": "Run npm install",
        },
    ),
    "request_delegation": (
        EnvelopeType.DELEGATE_WORK,
        {
            "timestamp": TS,
            "delegation_reason": "Large refactoring found",
            "new_task_description": "Refactor the auth module",
            "independence": "can_proceed_parallel",
            "priority": "P1",
            "estimated_duration": "2-3 hours",
        },
    ),
    "report_completion": (
        EnvelopeType.COMPLETION_REPORT,
        {
            "timestamp": TS,
            "status": "success",
            "deliverables": "- SECURITY_ANALYSIS.md (report)\n",
            "summary": "Scanned 120 files",
            "total_duration": "3h 45m",
        },
    ),
    "report_progress": (
        EnvelopeType.PROGRESS,
        {"timestamp": TS, "percent": 40, "message": "Scanning src/auth", "eta": "20m"},
    ),
}

RESULT_TEXT = """\
## Security Auditor Result

### Status
PARTIAL

### Summary
Audited the auth module.

### Findings
| ID | Severity | Title | File:Line |
|----|----------|-------|-----------|
| SEC-001 | high | Token never expires | src/auth/jwt.ts:42 |

### Confidence
80 - verified by reading the code

### Next Steps
- Review the OAuth2 flow
"""


def signal_text(type_: EnvelopeType, fields: dict[str, Any]) -> str:
    """The signal as an agent prints it: the tag lines around the YAML fields."""
    body = yaml.safe_dump({"agent_id": AGENT, **fields}, sort_keys=False, allow_unicode=True)
    return f"Some prose first.\n[{type_.value}]\n{body}[/{type_.value}]\n"


async def signals(bus: Bus) -> list[Envelope]:
    return await bus.envelopes(GROUP_ID)


def adapter_envelopes(bus: Bus, text: str) -> list[Envelope]:
    """What an adapter following this agent's output publishes for ``text``."""
    stream = OutputStream(AgentBus(bus.client, bus.keys, AGENT, GROUP_ID), "file:/tmp/out.md")
    return stream.feed(text.encode()) + stream.close()


def assert_same_signal(published: Envelope, expected: Envelope) -> None:
    assert (published.kind, published.type) == (expected.kind, expected.type)
    assert (published.agent_id, published.group_id) == (expected.agent_id, expected.group_id)
    assert published.payload == expected.payload
    assert published.source.startswith("mcp:")
    assert published.id != expected.id


async def test_list_tools_shows_typed_input_schemas(redis_url: str) -> None:
    async with session(redis_url) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == {*SIGNALS, "add_finding", "submit_result", "wait_for_directive", "status"}
    clarify = tools["request_clarification"].input_schema
    assert "agent_id" not in clarify["properties"]
    assert set(clarify["required"]) == {"blocked_at", "reason", "questions"}
    assert clarify["properties"]["questions"]["minItems"] == 1
    assert clarify["properties"]["timestamp"]["anyOf"][0]["format"] == "date-time"
    stop = tools["stop_work"].input_schema
    assert stop["$defs"]["StopReason"]["enum"] == ["blocker", "error", "completion"]
    delegate = tools["request_delegation"].input_schema
    assert delegate["$defs"]["Priority"]["enum"] == ["P0", "P1", "P2"]
    assert tools["report_progress"].input_schema["properties"]["percent"]["maximum"] == 100
    assert "title" in tools["add_finding"].input_schema["required"]
    result = tools["submit_result"].input_schema
    assert {"status", "summary"} <= set(result["required"]) and "agent" in result["properties"]
    assert "agent" not in result["required"]  # this agent's id when left out
    wait = tools["wait_for_directive"].input_schema["properties"]["timeout_seconds"]
    assert (wait["type"], wait["minimum"], wait["maximum"]) == ("number", 0, 3600)
    assert tools["status"].input_schema["properties"] == {}


async def test_every_signal_tool_publishes_what_the_adapter_publishes_for_the_text(redis_url: str) -> None:
    async with open_bus(redis_url) as bus, session(redis_url) as client:
        for name, (type_, fields) in SIGNALS.items():
            [expected] = adapter_envelopes(bus, signal_text(type_, fields))
            result = await call(client, name, fields)
            assert not result.is_error, text_of(result)
            published = (await signals(bus))[-1]
            assert published.id in text_of(result)
            assert_same_signal(published, expected)
        assert len(await signals(bus)) == len(SIGNALS)


async def test_submit_result_publishes_the_parsed_report(redis_url: str) -> None:
    async with open_bus(redis_url) as bus, session(redis_url) as client:
        [expected] = adapter_envelopes(bus, RESULT_TEXT)
        assert expected.type is EnvelopeType.RESULT
        result = await call(client, "submit_result", expected.payload.model_dump(mode="json"))
        assert not result.is_error, text_of(result)
        [published] = await signals(bus)
        assert_same_signal(published, expected)


async def test_a_result_without_its_agent_s_name_is_this_agent_s(redis_url: str) -> None:
    async with open_bus(redis_url) as bus, session(redis_url) as client:
        result = await call(client, "submit_result", {"status": "success", "summary": "Done."})
        assert not result.is_error, text_of(result)
        [published] = await signals(bus)
    assert isinstance(published.payload, ResultReport)
    assert (published.payload.agent, published.payload.status) == (AGENT, ResultStatus.SUCCESS)


async def test_add_finding_publishes_what_findings_add_publishes(redis_url: str) -> None:
    fields = {"id": "SEC-002", "title": "Hardcoded key", "file": "src/a.py", "line": 3, "severity": "HIGH"}
    async with open_bus(redis_url) as bus, session(redis_url) as client:
        [finding], errors = parse_findings(orjson.dumps(fields).decode(), AGENT)
        assert not errors
        expected = new_envelope(finding, agent_id=AGENT, group_id=GROUP_ID, source="findings-add")
        result = await call(client, "add_finding", fields)
        assert not result.is_error, text_of(result)
        [published] = await signals(bus)
        assert_same_signal(published, expected)
        assert published.payload.agent == AGENT  # type: ignore[union-attr]


INVALID_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("request_clarification", {"blocked_at": "x", "reason": "y", "questions": []}, "questions"),
    ("request_clarification", {"blocked_at": "x", "questions": [{"question_id": "Q1"}]}, "reason"),
    (
        "request_clarification",
        {"blocked_at": "x", "reason": "y", "questions": [{"question_id": "Q1", "text": t} for t in "ab"]},
        "question ids must differ: 'Q1' is used more than once",
    ),
    ("stop_work", {"stop_reason": "bored", "blocker_type": "error", "details": "d"}, "stop_reason"),
    ("stop_work", {"stop_reason": "blocker", "blocker_type": "error", "details": "   "}, "must not be blank"),
    ("report_progress", {"percent": 140}, "percent"),
    ("report_progress", {"percent": 5, "timestamp": "2026-01-11T08:45:00"}, "timestamp"),
    (
        "report_completion",
        {"status": "success", "summary": "s", "agent_id": "someone-else"},
        "someone-else",
    ),
    ("add_finding", {"title": "t", "line": 0}, "line"),
    ("submit_result", {"agent": "A", "status": "DONE", "summary": "s"}, "status"),
    ("submit_result", {"agent": "A", "status": "SUCCESS", "summary": " "}, "must not be blank"),
    ("wait_for_directive", {"timeout_seconds": -1}, "timeout_seconds"),
    ("wait_for_directive", {"timeout_seconds": True}, "timeout_seconds"),
    ("wait_for_directive", {"timeout_seconds": "1"}, "timeout_seconds"),
    ("status", {"verbose": True}, "verbose"),
    ("no_such_tool", {}, "unknown tool"),
    ("report_progress", {"percent": 1, "message": "x" * (5 << 20)}, "bytes encoded"),
]


async def test_an_invalid_call_is_refused_as_such_while_the_bus_is_down() -> None:
    """What is wrong with a call is said at once, not after --publish-timeout spent waiting for a bus
    that is down (an oversized call too)."""
    async with session("redis://127.0.0.1:1/0", "--publish-timeout", "60") as client:
        for name, arguments, message in INVALID_CALLS:
            result = await asyncio.wait_for(call(client, name, arguments), 30)
            assert result.is_error and message in text_of(result), (name, text_of(result))


async def test_a_call_retried_on_another_server_is_the_same_envelope_when_it_names_its_content(
    redis_url: str,
) -> None:
    """An agent retrying after its server was killed before answering: a finding, a result or a dated
    signal is the same envelope again (a duplicate the coordinator drops); an undated one is new."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("add_finding", {"title": "SQL injection in login", "file": "src/login.ts", "line": 3}),
        ("report_progress", {"percent": 5, "timestamp": TS}),
        ("report_progress", {"percent": 5}),
    ]
    ids: list[list[str]] = []
    async with open_bus(redis_url) as bus:
        for _ in range(2):
            async with session(redis_url) as client:
                for name, arguments in calls:
                    assert not (await call(client, name, arguments)).is_error
            ids.append([e.id for e in (await signals(bus))[-len(calls) :]])
    first, second = ids
    assert first[:2] == second[:2] and first[2] != second[2]


async def test_an_invalid_call_is_a_tool_error_and_publishes_nothing(redis_url: str) -> None:
    async with open_bus(redis_url) as bus, session(redis_url) as client:
        stream = bus.stream(GROUP_ID, StreamKind.SIGNALS)
        for name, arguments, message in INVALID_CALLS:
            result = await call(client, name, arguments)
            assert result.is_error, (name, arguments)
            assert message in text_of(result), (name, text_of(result))
        assert await bus.client.exists(stream) == 0  # nothing was published
        valid = await call(client, "report_progress", {"percent": 5})
        assert not valid.is_error, text_of(valid)
        assert await bus.client.xlen(stream) == 1  # while a valid call is
        unnamed = await call(client, "report_progress", {"percent": 6, "agent_id": None})  # null: absent
        assert not unnamed.is_error, text_of(unnamed)


async def test_a_server_without_identity_explains_itself(redis_url: str) -> None:
    params = server(redis_url)
    params.env = {**(params.env or {}), "SUBAGENT_BUS_AGENT_ID": "", "SUBAGENT_BUS_GROUP": ""}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
        initialized = await client.initialize()
        assert initialized.server_info.version == version("subagent-bus")
        assert len((await client.list_tools()).tools) == 9
        result = await call(client, "report_progress", {"percent": 5})
    assert result.is_error
    assert "no agent identity" in text_of(result)


def directive(answer: str) -> Envelope:
    payload = ClarificationResponse(answers=[AnswerItem(question_id="Q1", answer=answer)], next_step="Go on")
    return new_envelope(payload, agent_id=AGENT, group_id=GROUP_ID, source="coordinator")


async def test_wait_for_directive_returns_the_prompt_once(redis_url: str) -> None:
    async with open_bus(redis_url) as bus, session(redis_url) as client:
        waiting = asyncio.create_task(call(client, "wait_for_directive", {"timeout_seconds": 30}))

        async def blocked() -> bool:
            info: dict[str, Any] = await bus.client.info("clients")
            return int(info["blocked_clients"]) >= 1

        await wait_until(blocked, 20, "the tool to wait on the inbox")
        status = await call(client, "status", {})  # other calls are served while one waits
        assert not status.is_error
        sent = directive("JWT")
        await Publisher(bus.client, bus.keys).send_directive(sent)
        result = await waiting
        assert not result.is_error
        assert text_of(result) == sent.payload.render()  # type: ignore[union-attr]
        again = await call(client, "wait_for_directive", {"timeout_seconds": 0.2})
        assert text_of(again) == "no directive within 0.2 s"


async def test_a_client_of_the_revision_without_initialize_is_served(redis_url: str) -> None:
    """Revision 2026-07-28 names itself in every request's _meta and sends no initialize: the server
    answered each request that it came before initialize."""
    identity = ("--redis-url", redis_url, "--agent-id", AGENT, "--group", GROUP_ID)
    async with open_bus(redis_url) as bus, Client(server(redis_url, *identity), mode="2026-07-28") as client:
        assert "wait_for_directive" in {tool.name for tool in (await client.list_tools()).tools}
        sent = directive("JWT")
        await Publisher(bus.client, bus.keys).send_directive(sent)
        result = await client.call_tool("wait_for_directive", {"timeout_seconds": 30})
        assert not result.is_error
        assert text_of(result) == sent.payload.render()  # type: ignore[union-attr]
        await client.call_tool("status", {})  # answered after the directive's reply: acknowledged by now
        pending = await bus.client.xpending(bus.keys.inbox(bus.keys.shard_of(GROUP_ID), AGENT), "adapter")
        assert pending["pending"] == 0


async def test_a_directive_of_another_group_is_left_for_its_listener(redis_url: str) -> None:
    # one agent id in two groups of one shard has one inbox there; `listen` leaves the other's alone too
    async with open_bus(redis_url) as bus, session(redis_url) as client:
        keys = bus.keys
        other = next(
            g for g in (f"other-{n}" for n in range(100)) if keys.shard_of(g) == keys.shard_of(GROUP_ID)
        )
        sent = directive("JWT").model_copy(update={"group_id": other})
        await Publisher(bus.client, keys).send_directive(sent)
        result = await call(client, "wait_for_directive", {"timeout_seconds": 2})  # waits for its own
        assert result.is_error
        assert f"is for group {other!r}, not {GROUP_ID!r}: left for a listener of that group" in text_of(
            result
        )
        mine = directive("OAuth2")
        await Publisher(bus.client, keys).send_directive(mine)  # behind it in the inbox
        result = await call(client, "wait_for_directive", {"timeout_seconds": 10})
        assert text_of(result) == mine.payload.render()  # type: ignore[union-attr]
        inbox = keys.inbox(keys.shard_of(GROUP_ID), AGENT)
        assert (await bus.client.xpending(inbox, ConsumerGroup.ADAPTER.value))["pending"] == 1


def _requests(*messages: dict[str, Any]) -> bytes:
    return b"".join(orjson.dumps({"jsonrpc": "2.0", **m}) + b"\n" for m in messages)


def _unread_server(url: str, claim_idle_ms: int = 200) -> subprocess.Popen[bytes]:
    """A server whose stdout the test reads only when it wants to."""
    args = ["mcp", "--redis-url", url, "--agent-id", AGENT, "--group", GROUP_ID]
    args += ["--claim-idle-ms", str(claim_idle_ms)]
    return subprocess.Popen(
        [CLI, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )


async def _reply_being_written(slow: subprocess.Popen[bytes]) -> None:
    """Have ``slow`` (:func:`_unread_server`) take the directive and begin its reply, which waits for the
    test to read it."""
    assert slow.stdin is not None and slow.stdout is not None
    hello = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    }
    slow.stdin.write(_requests({"id": 1, "method": "initialize", "params": hello}))
    slow.stdin.flush()
    assert b'"id":1' in await asyncio.to_thread(slow.stdout.readline)
    wait = {"name": "wait_for_directive", "arguments": {"timeout_seconds": 10}}
    slow.stdin.write(
        _requests({"method": "notifications/initialized"}, {"id": 2, "method": "tools/call", "params": wait})
    )
    slow.stdin.flush()
    await asyncio.to_thread(slow.stdout.read, 1000)  # the reply is being written, and cannot all be


async def test_a_directive_is_acknowledged_only_once_its_reply_is_out(redis_url: str) -> None:
    """A server killed while it writes the reply (a client slow to read a long answer) leaves the
    directive pending: the next server delivers it again, as the next `listen` would."""
    sent = directive("JWT, because " + "x" * 300_000)  # far more than a pipe holds
    async with open_bus(redis_url) as bus:
        await Publisher(bus.client, bus.keys).send_directive(sent)
        slow = _unread_server(redis_url)
        await _reply_being_written(slow)
        inbox = bus.inbox(GROUP_ID, AGENT)
        assert (await bus.client.xpending(inbox, "adapter"))["pending"] == 1  # read, not acknowledged
        slow.kill()
        slow.wait()

        async with session(redis_url, "--claim-idle-ms", "200") as client:
            again = await call(client, "wait_for_directive", {"timeout_seconds": 15})
            assert text_of(again) == sent.payload.render()  # type: ignore[union-attr]
        assert (await bus.client.xpending(inbox, "adapter"))["pending"] == 0


async def test_a_reply_being_written_is_held_under_a_long_claim_idle_too(redis_url: str) -> None:
    """Refreshed a quarter of --claim-idle-ms apart, for a minute: from 240 000 on, no refresh at all, and
    a `listen` took the directive while the server's reply was still being written."""
    sent = directive("JWT, because " + "x" * 300_000)
    async with open_bus(redis_url) as bus:
        await Publisher(bus.client, bus.keys).send_directive(sent)
        slow = _unread_server(redis_url, claim_idle_ms=300_000)
        try:
            await _reply_being_written(slow)
            done = await asyncio.to_thread(
                subprocess.run,
                [
                    CLI,
                    "listen",
                    "--agent-id",
                    AGENT,
                    "--group",
                    GROUP_ID,
                    "--timeout",
                    "4",
                    "--redis-url",
                    redis_url,
                ],
                capture_output=True,
                timeout=60,
                check=False,
            )
            assert (done.returncode, done.stdout) == (3, b""), done.stderr  # nothing for it: held
        finally:
            slow.kill()
            slow.wait()


def sb(url: str, *args: str) -> None:
    done = subprocess.run([CLI, *args, "--redis-url", url], check=False, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()


async def test_the_clarification_round_trip_through_a_real_coordinator(redis_url: str) -> None:
    """request_clarification -> coordinator -> status shows the question -> answer -> wait returns it."""
    _, fields = SIGNALS["request_clarification"]
    async with session(redis_url) as client:
        assert not (await call(client, "request_clarification", fields)).is_error
        await asyncio.to_thread(sb, redis_url, "coordinator", "--burst", "--lease-ttl", "1000")
        record = orjson.loads(text_of(await call(client, "status", {})))
        assert record["state"] == "awaiting_clarification"
        assert record["questions"]["questions"][0]["text"] == "OAuth2, JWT, or both?"
        await asyncio.to_thread(sb, redis_url, "answer", AGENT, "Q1=Both", "Q2=3.0")
        await asyncio.to_thread(sb, redis_url, "coordinator", "--burst", "--lease-ttl", "1000")
        prompt = text_of(await call(client, "wait_for_directive", {"timeout_seconds": 10}))
        assert prompt.startswith("## CLARIFICATION RESPONSE")
        assert "A1: Both" in prompt and "A2: 3.0" in prompt
        record = orjson.loads(text_of(await call(client, "status", {})))
        assert record["state"] == "running"


def _server_waiting_for(url: str) -> subprocess.Popen[bytes]:
    """A server that waits a minute for the bus to publish a call."""
    args = ["mcp", "--redis-url", url, "--agent-id", AGENT, "--group", GROUP_ID, "--publish-timeout", "60"]
    return subprocess.Popen(
        [CLI, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )


async def test_calls_publishing_when_the_input_ends_are_published_and_answered(tmp_path: Path) -> None:
    """The client sends its calls and closes stdin while the bus is still down: the server waits for the
    bus (--publish-timeout), publishes them and answers each, rather than cancel them with an error that
    leaves the client not knowing whether its signal went out."""
    redis = RedisProcess(tmp_path / "redis")  # its port chosen, nothing listening there yet
    mcp = _server_waiting_for(redis.url)
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    calls = [
        {"id": n, "method": "tools/call", "params": {"name": "report_progress", "arguments": {"percent": n}}}
        for n in range(2, 7)
    ]
    try:
        assert mcp.stdin is not None
        mcp.stdin.write(
            _requests(
                {"id": 1, "method": "initialize", "params": hello}, {"method": "notifications/initialized"}
            )
            + _requests(*calls)
        )
        mcp.stdin.close()  # the calls wait for the bus
        redis.start()
        assert mcp.stdout is not None
        out = await asyncio.wait_for(asyncio.to_thread(mcp.stdout.read), 60)  # to the server's exit
        replies = {r["id"]: r for r in map(orjson.loads, out.splitlines()) if r.get("id") != 1}
        assert sorted(replies) == [2, 3, 4, 5, 6]
        assert all("result" in r and not r["result"].get("isError") for r in replies.values()), replies
        async with open_bus(redis.url) as bus:
            published = [e.payload.percent for e in await signals(bus)]  # type: ignore[union-attr]
        assert sorted(published) == [2, 3, 4, 5, 6]
    finally:
        if mcp.poll() is None:
            mcp.kill()
        redis.stop()


async def test_requests_sent_just_before_the_input_ends_are_all_run_and_answered(redis_url: str) -> None:
    """A call the SDK had not begun to run when the input ended was cancelled ("Connection closed") and
    its finding never published; a ping or a tools/list got no answer at all."""
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    finding = {"name": "add_finding", "arguments": {"title": "sent last", "file": "a.py", "line": 8}}
    lines = _requests(
        {"id": 1, "method": "initialize", "params": hello},
        {"method": "notifications/initialized"},
        {"id": 2, "method": "ping"},
        {"id": 3, "method": "tools/list"},
        {"id": 4, "method": "tools/call", "params": finding},
        {"id": 5, "method": "tools/call", "params": {"name": "status", "arguments": {}}},
    )
    args = ["mcp", "--redis-url", redis_url, "--agent-id", AGENT, "--group", GROUP_ID]
    done = await asyncio.to_thread(subprocess.run, [CLI, *args], input=lines, capture_output=True, timeout=60)
    replies = {r["id"]: r for r in map(orjson.loads, done.stdout.splitlines())}
    assert sorted(replies) == [1, 2, 3, 4, 5], done.stdout
    assert all("result" in r for r in replies.values()), replies
    assert not replies[4]["result"].get("isError"), replies[4]
    async with open_bus(redis_url) as bus:
        assert [e.payload.title for e in await signals(bus)] == ["sent last"]  # type: ignore[union-attr]


async def test_a_wait_for_a_directive_is_not_waited_for_at_the_end_of_the_input(redis_url: str) -> None:
    """It may wait an hour: it is cancelled, as before (the server waited for it as long as for a call
    still publishing, twice --publish-timeout)."""
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    wait = {"name": "wait_for_directive", "arguments": {"timeout_seconds": 600}}
    lines = _requests(
        {"id": 1, "method": "initialize", "params": hello},
        {"method": "notifications/initialized"},
        {"id": 2, "method": "tools/call", "params": wait},
    )
    args = [
        "mcp",
        "--redis-url",
        redis_url,
        "--agent-id",
        AGENT,
        "--group",
        GROUP_ID,
        "--publish-timeout",
        "60",
    ]
    done = await asyncio.to_thread(subprocess.run, [CLI, *args], input=lines, capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr


async def test_a_call_the_client_cancelled_is_not_waited_for_at_the_end_of_the_input(tmp_path: Path) -> None:
    """No reply comes for a cancelled call: the end of the input does not wait for one (the server would
    wait out twice --publish-timeout)."""
    redis = RedisProcess(tmp_path / "redis")  # never started: the call waits for the bus
    mcp = _server_waiting_for(redis.url)
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    progress = {"name": "report_progress", "arguments": {"percent": 1}}
    cancel = {"method": "notifications/cancelled", "params": {"requestId": 2, "reason": "changed my mind"}}
    try:
        assert mcp.stdin is not None and mcp.stdout is not None
        mcp.stdin.write(
            _requests(
                {"id": 1, "method": "initialize", "params": hello}, {"method": "notifications/initialized"}
            )
            + _requests({"id": 2, "method": "tools/call", "params": progress})
        )
        mcp.stdin.flush()
        assert b'"id":1' in await asyncio.to_thread(mcp.stdout.readline)
        mcp.stdin.write(_requests(cancel))
        mcp.stdin.close()
        out = await asyncio.wait_for(asyncio.to_thread(mcp.stdout.read), 30)  # to the server's exit
        assert b'"id":2' not in out or b"error" in out
    finally:
        if mcp.poll() is None:
            mcp.kill()
