"""``subagent-bus mcp`` given valid JSON-RPC with hostile values: numbers JSON can write but a tool call
cannot carry as they are, over the real stdio transport against a real Redis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp_types as types
import orjson
import pytest
from adapter_kit import open_bus, wait_until
from test_mcp_input import AGENT, GROUP_ID, RawClient, raw_server

from agents.mcp_inflight import RequestsInFlight, reply_of
from agents.mcp_server import MAX_WAITS, Identity, ProtocolServer
from agents.mcp_tools import WaitInput
from bus.directives import AnswerItem, ClarificationResponse
from bus.envelope import Envelope, new_envelope
from bus.publisher import Publisher
from bus.settings import Settings
from bus.signals import Progress


def directive(answer: str) -> Envelope:
    payload = ClarificationResponse(answers=[AnswerItem(question_id="Q1", answer=answer)], next_step="Go on")
    return new_envelope(payload, agent_id=AGENT, group_id=GROUP_ID, source="coordinator")


async def call(client: RawClient, id_: int, params: bytes) -> dict[str, Any]:
    """The reply to a ``tools/call`` request of ``id_`` whose params are the JSON ``params``, as written."""
    await client.send(b'{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": %s}\n' % (id_, params))
    return await client.reply()


@pytest.mark.parametrize("id_", [10**30, -(10**30), 2**64 + 1])
async def test_a_directive_returned_to_a_request_with_a_huge_id_is_acknowledged(
    redis_url: str, tmp_path: Path, id_: int
) -> None:
    """An id beyond 64 bits is an integer JSON-RPC allows: the reply carrying the directive is matched
    to it, and the directive acknowledged, not left pending for the next wait to deliver again."""
    sent = directive("JWT")
    async with open_bus(redis_url) as bus:
        await Publisher(bus.client, bus.keys).send_directive(sent)
        async with raw_server(redis_url, tmp_path / "stderr") as client:
            arguments = {"name": "wait_for_directive", "arguments": {"timeout_seconds": 10}}
            reply = await call(client, id_, orjson.dumps(arguments))
            assert reply["result"]["content"][0]["text"] == sent.payload.render()  # type: ignore[union-attr]
            await client.request("ping")  # its reply is written after the directive's was acknowledged
            inbox = bus.inbox(GROUP_ID, AGENT)
            assert (await bus.client.xpending(inbox, "adapter"))["pending"] == 0


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        (b'{"percent": 40, "x": Infinity}', "x"),
        (b'{"percent": 40, "x": {"y": [1, -Infinity]}}', "x.y[1]"),
        (b'{"percent": 40, "x": NaN}', "x"),
        (b'{"percent": 40, "x": 1e400}', "x"),
        (b'{"percent": 40, "message": "m", "eta": -1e999}', "eta"),
    ],
)
async def test_a_number_beyond_a_float_is_refused_not_published_as_null(
    redis_url: str, tmp_path: Path, arguments: bytes, field: str
) -> None:
    async with raw_server(redis_url, tmp_path / "stderr") as client:
        params = b'{"name": "report_progress", "arguments": %s}' % arguments
        reply = await call(client, 3, params)
        assert reply["id"] == 3 and reply["result"]["isError"], reply
        text = reply["result"]["content"][0]["text"]
        assert f"invalid report_progress call: field '{field}': not a finite number" in text, text
        result = await client.request("tools/call", {"name": "report_progress", "arguments": {"percent": 41}})
        assert not result["isError"], result
        async with open_bus(redis_url) as bus:
            published = [e.payload for e in await bus.envelopes(GROUP_ID)]
            assert [p.percent for p in published if isinstance(p, Progress)] == [41]


async def test_a_dated_signal_with_an_integer_beyond_64_bits_is_published_once(
    redis_url: str, tmp_path: Path
) -> None:
    """Its id is derived from its content, which holds a number orjson cannot write: the call is
    published (as an adapter publishes the same signal printed as text), and made again it is the same
    envelope."""
    arguments = (
        b'{"percent": 40, "timestamp": "2026-01-11T08:45:00-05:00", "x": 1000000000000000000000000000000}'
    )
    params = b'{"name": "report_progress", "arguments": %s}' % arguments
    ids = []
    async with raw_server(redis_url, tmp_path / "stderr") as client:
        for id_ in (4, 5):
            reply = await call(client, id_, params)
            assert reply["id"] == id_ and not reply["result"]["isError"], reply
            ids.append(reply["result"]["content"][0]["text"].split()[2])
    assert ids[0] == ids[1]
    async with open_bus(redis_url) as bus:
        [published] = {e.id: e for e in await bus.envelopes(GROUP_ID)}.values()
        assert published.id == ids[0]
        assert published.payload.model_extra == {"x": 10**30}
    assert "Traceback" not in (tmp_path / "stderr").read_text()


@pytest.mark.parametrize("tool", ["add_finding", "submit_result"])
@pytest.mark.parametrize(("field", "value"), [("line", "true"), ("confidence", "false")])
async def test_a_finding_with_a_boolean_for_a_number_is_refused_as_findings_add_refuses_it(
    redis_url: str, tmp_path: Path, field: str, value: str, tool: str
) -> None:
    finding = b'{"title": "SQL injection", "file": "src/a.py", "%s": %s}' % (field.encode(), value.encode())
    where = "" if tool == "add_finding" else "findings[1]."
    if tool == "submit_result":
        finding = b'{"status": "success", "summary": "Done.", "findings": [{"title": "fine"}, %s]}' % finding
    params = b'{"name": "%s", "arguments": %s}' % (tool.encode(), finding)
    async with raw_server(redis_url, tmp_path / "stderr") as client:
        reply = await call(client, 6, params)
        assert reply["id"] == 6 and reply["result"]["isError"], reply
        text = reply["result"]["content"][0]["text"]
        assert text == f"invalid {tool} call: {where}{field}: a number, not {value}", text
    async with open_bus(redis_url) as bus:
        assert await bus.envelopes(GROUP_ID) == []


async def test_a_request_with_a_key_given_twice_is_refused_rather_than_read_with_one_of_its_values(
    redis_url: str, tmp_path: Path
) -> None:
    """No MCP client writes one (it sends objects), but a hand-written one can: it is told, as
    ``findings add`` tells it, and nothing is published."""
    arguments = b'{"percent": 40, "message": "first", "x": {"a": 1, "a": 2}, "message": "second"}'
    params = b'{"name": "report_progress", "arguments": %s}' % arguments
    stderr = tmp_path / "stderr"
    async with raw_server(redis_url, stderr) as client:
        reply = await call(client, 7, params)
        assert (reply["id"], reply["error"]["code"]) == (7, types.INVALID_REQUEST), reply
        message = reply["error"]["message"]
        assert "the keys 'a', 'message' are each given more than once in one object" in message, message
        finding = b'{"name": "add_finding", "arguments": {"id": "F1", "title": "t", "id": "F2"}}'
        reply = await call(client, 8, finding)
        assert (reply["id"], reply["error"]["code"]) == (8, types.INVALID_REQUEST), reply
        assert "the key 'id' is given more than once" in reply["error"]["message"], reply
        await client.send(b'{"jsonrpc": "2.0", "id": 9, "method": "ping", "id": 10}\n')
        reply = await client.reply()  # which id to answer is what cannot be said
        assert (reply["id"], reply["error"]["code"]) == (None, types.INVALID_REQUEST), reply
        await client.send(
            b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1, "requestId": 2}}\n'
        )
        await client.assert_served()  # a notification is not answered, and the next request is
    async with open_bus(redis_url) as bus:
        assert await bus.envelopes(GROUP_ID) == []
    logged = stderr.read_text()
    assert "answered -32600" in logged and "dropped a notification" in logged, logged


@pytest.mark.parametrize("value", [b"NaN", b"Infinity", b"1e400"])
async def test_wait_for_directive_says_a_timeout_that_is_no_number_is_not_finite(
    redis_url: str, tmp_path: Path, value: bytes
) -> None:
    params = b'{"name": "wait_for_directive", "arguments": {"timeout_seconds": %s}}' % value
    async with raw_server(redis_url, tmp_path / "stderr") as client:
        reply = await call(client, 9, params)
        assert reply["id"] == 9 and reply["result"]["isError"], reply
        text = reply["result"]["content"][0]["text"]
        assert text == "invalid arguments: field 'timeout_seconds': Input should be a finite number", text


async def test_an_unknown_tool_s_name_is_cut_in_its_error(redis_url: str, tmp_path: Path) -> None:
    name = "no_such_tool_" + "x" * (3 << 20)
    async with raw_server(redis_url, tmp_path / "stderr") as client:
        reply = await call(client, 11, orjson.dumps({"name": name, "arguments": {}}))
        assert reply["id"] == 11 and reply["result"]["isError"], reply
        text = reply["result"]["content"][0]["text"]
        assert text.startswith("unknown tool 'no_such_tool_xxx") and text.endswith("…'"), text[:200]
        assert len(text) < 100, len(text)


async def test_a_request_under_the_id_of_one_in_flight_is_refused_and_not_run(
    redis_url: str, tmp_path: Path
) -> None:
    """Two waits under one id, each holding a directive before either reply is written, would have one
    directive acknowledged at the other's reply and delivered again: the second is refused unrun."""
    wait = orjson.dumps({"name": "wait_for_directive", "arguments": {"timeout_seconds": 20}})
    quick = orjson.dumps({"name": "wait_for_directive", "arguments": {"timeout_seconds": 1}})
    async with open_bus(redis_url) as bus, raw_server(redis_url, tmp_path / "stderr") as client:
        await client.send(b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": %s}\n' % wait)

        async def blocked() -> bool:
            info: dict[str, Any] = await bus.client.info("clients")
            return int(info["blocked_clients"]) >= 1

        await wait_until(blocked, 20, "the first wait to block on the inbox")
        for _ in range(2):  # a refusal under the id does not end the first request's flight
            reply = await call(client, 5, quick)
            assert (reply["id"], reply.get("error", {}).get("code")) == (5, types.INVALID_REQUEST), reply
            assert "id 5 is the id of a request still in flight" in reply["error"]["message"], reply
        # nor does the error of a malformed request under it, which the screen answers itself
        await client.send(b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": 123}}\n')
        assert (await client.reply())["id"] == 5
        await client.send(b'{"jsonrpc": "2.0", "id": "05", "method": "tools/call", "params": %s}\n' % quick)
        reply = await client.reply()  # the id the SDK takes for 5
        assert "is the id of a request still in flight" in reply["error"]["message"], reply
        sent = directive("JWT")
        await Publisher(bus.client, bus.keys).send_directive(sent)
        reply = await client.reply()
        assert reply["id"] == 5 and reply["result"]["content"][0]["text"] == sent.payload.render(), reply  # type: ignore[union-attr]
        answered = await call(client, 5, orjson.dumps({"name": "status", "arguments": {}}))
        assert answered["id"] == 5 and "result" in answered, answered  # answered, the id is free again
        inbox = bus.inbox(GROUP_ID, AGENT)
        assert (await bus.client.xpending(inbox, "adapter"))["pending"] == 0


def test_an_id_is_in_flight_until_a_line_answers_it_that_is_not_a_refusal() -> None:
    requests = RequestsInFlight()
    long_id = "r" * 1000
    error = '{"jsonrpc": "2.0", "id": 7, "error": {"code": -32600, "message": "m"}}'
    assert requests.take(7) and requests.take("x7") and requests.take(long_id)
    assert not requests.take(7) and not requests.take("07")  # "07" is 7, as the SDK matches ids
    requests.refusing(7)  # their refusals: two more lines under id 7
    requests.refusing("07")
    requests.refusing(8)  # an error under an id not in flight ends nothing: not counted
    requests.answered(reply_of('{"jsonrpc": "2.0", "id": 7, "result": {}}'))  # the first of the three
    assert not requests.take(7)  # its refusals are still to be written
    requests.refusing(7)
    for _ in range(3):
        requests.answered(reply_of(error))
    requests.answered(reply_of('{"jsonrpc": "2.0", "id": 7, "method": "ping"}'))  # a request of the server's
    assert requests.take(7) and requests.take(8)
    assert not requests.take("x7") and not requests.take(long_id)
    requests.refusing(long_id)
    for _ in range(2):  # the refusal, and the answer
        requests.answered(reply_of(orjson.dumps({"jsonrpc": "2.0", "id": long_id, "result": {}}).decode()))
    assert requests.take(long_id)


async def test_a_directive_whose_reply_waits_to_be_written_is_not_taken_by_another_wait(
    redis_url: str,
) -> None:
    """A client slow to read its stdout leaves a reply unwritten past the idle time after which a wait
    takes an entry over from a dead listener: the server keeps its own entry fresh meanwhile."""
    server = ProtocolServer(Settings.from_url(redis_url), Identity(AGENT, GROUP_ID), claim_idle_ms=100)
    try:
        async with open_bus(redis_url) as bus:
            sent = directive("JWT")
            await Publisher(bus.client, bus.keys).send_directive(sent)
            first = await server.wait_for_directive(WaitInput(timeout_seconds=10), request_id=1)
            assert first.content[0].text == sent.payload.render()  # type: ignore[union-attr]
            second = await server.wait_for_directive(WaitInput(timeout_seconds=0.5), request_id=2)
            assert second.content[0].text == "no directive within 0.5 s"  # type: ignore[union-attr]
            written = server._writing(reply_of('{"jsonrpc": "2.0", "id": 1, "result": {}}'))
            assert written is not None
            await written()  # the first reply is out: its directive is acknowledged
            assert (await bus.client.xpending(bus.inbox(GROUP_ID, AGENT), "adapter"))["pending"] == 0
    finally:
        await server.aclose()


async def test_waits_beyond_the_limit_are_refused_each_holding_a_connection(
    redis_url: str, tmp_path: Path
) -> None:
    """A client that sends many waits at once would hold as many connections to the server: past
    MAX_WAITS one is refused, and the count goes down as waits are answered."""
    wait = orjson.dumps({"name": "wait_for_directive", "arguments": {"timeout_seconds": 30}})
    async with open_bus(redis_url) as bus, raw_server(redis_url, tmp_path / "stderr") as client:
        for id_ in range(MAX_WAITS):
            await client.send(
                b'{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": %s}\n' % (id_, wait)
            )

        async def blocked() -> bool:
            info: dict[str, Any] = await bus.client.info("clients")
            return int(info["blocked_clients"]) >= MAX_WAITS

        await wait_until(blocked, 20, f"{MAX_WAITS} waits to block on the inbox")
        refused = await call(client, 100, wait)
        assert refused["id"] == 100 and refused["result"]["isError"], refused
        assert f"{MAX_WAITS} calls of wait_for_directive are waiting already" in text_of(refused)
        publisher = Publisher(bus.client, bus.keys)
        sent = [directive(f"answer {n}") for n in range(MAX_WAITS + 1)]
        for envelope in sent[:MAX_WAITS]:
            await publisher.send_directive(envelope)
        replies = [await client.reply() for _ in range(MAX_WAITS)]
        assert sorted(r["id"] for r in replies) == list(range(MAX_WAITS))
        got = sorted(text_of(r) for r in replies)
        await publisher.send_directive(sent[-1])
        last = await call(client, 101, wait)  # the count went down with the answers
        assert sorted([*got, text_of(last)]) == sorted(e.payload.render() for e in sent)  # type: ignore[union-attr]
        await client.request("ping")  # its reply is written after the last directive was acknowledged
        assert (await bus.client.xpending(bus.inbox(GROUP_ID, AGENT), "adapter"))["pending"] == 0


def text_of(reply: dict[str, Any]) -> str:
    return "".join(block["text"] for block in reply["result"]["content"])
