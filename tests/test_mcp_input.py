"""``subagent-bus mcp`` given lines that are not JSON-RPC messages, or too long: each is answered as
JSON-RPC 2.0 says (``-32700`` parse error, ``-32600`` invalid request), logged on stderr, and the next
valid request is served. The server runs as a process on pipes, against a real Redis.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import orjson
import pytest
from adapter_kit import CLI, open_bus
from mcp.shared.message import SessionMessage

from agents.mcp_rejection import rejection
from agents.mcp_stdio import MAX_LINE_BYTES, Overlong, ScreenedLines, StdinLines
from bus.signals import Progress

AGENT = "input-agent"
GROUP_ID = "g-input"
REPLY_TIMEOUT_S = 30.0
PARSE, INVALID, PARAMS = types.PARSE_ERROR, types.INVALID_REQUEST, types.INVALID_PARAMS

# (line, error code, id of the answer, words of its message)
HOSTILE: list[tuple[bytes, int, int | str | None, list[str]]] = [
    (b"this is not JSON", PARSE, None, ["not valid JSON", "line 1 column 2"]),
    (b'{"jsonrpc": "2.0", "id": 3, "method": "tools/list"', PARSE, None, ["EOF while parsing an object"]),
    (b"[" * 1000 + b"]" * 1000, PARSE, None, ["nested too deeply"]),
    (
        b'{"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"a": '
        + b"[" * 300
        + b"]" * 300
        + b"}}",
        PARSE,
        None,
        ["nested too deeply"],
    ),
    (b"\xff\xfe not UTF-8", PARSE, None, ["not valid JSON"]),
    (b"42", INVALID, None, ["a JSON object, not a number"]),
    (b'"tools/list"', INVALID, None, ["a JSON object, not a string"]),
    (b"null", INVALID, None, ["a JSON object, not null"]),
    (b'{"id": 7}', INVALID, 7, ['"jsonrpc" is missing', '"method" is missing']),
    (b'{"id": "req-8", "params": {}}', INVALID, "req-8", ['"method" is missing']),
    (b'{"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": [1]}', INVALID, 9, ['"params"']),
    (b'{"jsonrpc": "1.0", "method": "ping"}', INVALID, None, ["notification", '"jsonrpc"']),
    (b'{"jsonrpc": "2.0", "id": true}', INVALID, None, ['"id" must be a string or an integer']),
    (
        b'{"jsonrpc": "2.0", "id": [1], "method": "ping"}',
        INVALID,
        None,
        ['"id" must be a string or an integer'],
    ),
    (
        b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}',
        INVALID,
        None,
        ['"id" must be a string or an integer'],
    ),
    (
        b'{"jsonrpc": "2.0", "id": null, "method": "ping"}',
        INVALID,
        None,
        ['"id" must be a string or an integer'],
    ),
    (b'[{"jsonrpc": "2.0", "id": 10, "method": "ping"}]', INVALID, None, ["batch"]),
    # a known method's parameters: the SDK would answer only "Invalid request parameters"
    (b'{"jsonrpc": "2.0", "id": 12, "method": "tools/call"}', PARAMS, 12, ["params: Field required"]),
    (
        b'{"jsonrpc": "2.0", "id": 13, "method": "tools/call", "params": {"name": 5}}',
        PARAMS,
        13,
        ["params.name: Input should be a valid string"],
    ),
    (
        b'{"jsonrpc": "2.0", "id": "a", "method": "tools/call", "params": {"name": "x", "arguments": []}}',
        PARAMS,
        "a",
        ["params.arguments: Input should be a valid dictionary"],
    ),
]


@pytest.mark.parametrize(("line", "code", "id_", "words"), HOSTILE, ids=range(len(HOSTILE)))
def test_each_line_that_is_not_a_message_gets_its_error(
    line: bytes, code: int, id_: int | str | None, words: list[str]
) -> None:
    error = rejection(line.decode("utf-8", errors="replace"))
    assert error is not None
    assert (error.error.code, error.id) == (code, id_)
    for word in words:
        assert word in error.error.message
    prefix = {PARSE: "Parse error: ", INVALID: "Invalid Request: ", PARAMS: "Invalid params: "}[code]
    assert error.error.message.startswith(prefix)


# malformed responses: refused like any line the SDK would not take, but never answered
MALFORMED_RESPONSES: list[tuple[bytes, int | str, list[str]]] = [
    (b'{"jsonrpc": "2.0", "id": 11, "error": {}}', 11, ['"error.code" is missing']),
    (b'{"jsonrpc": "2.0", "id": 12, "result": 5}', 12, ['"result"']),
    (b'{"jsonrpc": "1.0", "id": "r", "result": {}}', "r", ['"jsonrpc"']),
]


@pytest.mark.parametrize(("line", "id_", "words"), MALFORMED_RESPONSES, ids=range(len(MALFORMED_RESPONSES)))
def test_a_malformed_response_is_refused(line: bytes, id_: int | str, words: list[str]) -> None:
    error = rejection(line.decode())
    assert error is not None
    assert (error.error.code, error.id) == (INVALID, id_)
    assert "response:" in error.error.message
    for word in words:
        assert word in error.error.message


@pytest.mark.parametrize(
    "line",
    [
        '{"jsonrpc": "2.0", "id": 1, "method": "ping"}',
        '{"jsonrpc": "2.0", "id": "a", "method": "tools/call", "params": {"name": "status"}}',
        '{"jsonrpc": "2.0", "method": "notifications/initialized"}',
        '{"jsonrpc": "2.0", "id": 2, "result": {}}',
        '{"jsonrpc": "2.0", "id": 3, "error": {"code": -1, "message": "no"}}',
        '  {"jsonrpc": "2.0", "id": 4, "method": "ping"}\r',
    ],
)
def test_a_message_the_sdk_takes_is_passed_on(line: str) -> None:
    assert rejection(line) is None


async def test_stdin_lines_drop_an_over_long_line_up_to_its_newline() -> None:
    read_fd, write_fd = os.pipe()
    try:
        lines = StdinLines(read_fd, max_line_bytes=10)
        os.write(write_fd, b"0123456789\n")  # at the limit: taken
        assert await asyncio.wait_for(anext(lines), REPLY_TIMEOUT_S) == "0123456789\n"
        os.write(write_fd, b"0123456789A")  # one over, no newline yet: reported at once
        assert await asyncio.wait_for(anext(lines), REPLY_TIMEOUT_S) == Overlong(10)
        os.write(write_fd, b'BCDEF {"the": "rest"} ' * 100)  # the rest of that line is dropped
        os.write(write_fd, b"\nnext\nabcdefghijklmnop\nlast")
        assert await asyncio.wait_for(anext(lines), REPLY_TIMEOUT_S) == "next\n"
        assert await asyncio.wait_for(anext(lines), REPLY_TIMEOUT_S) == Overlong(10)
    finally:
        os.close(write_fd)
    assert await asyncio.wait_for(anext(lines), REPLY_TIMEOUT_S) == "last"  # unterminated at the end
    assert await asyncio.wait_for(anext(lines, None), REPLY_TIMEOUT_S) is None
    os.close(read_fd)


async def test_stdin_lines_wait_on_a_descriptor_handed_over_non_blocking() -> None:
    # its EAGAIN was taken for the end of the input: the server exited at once, status 0, without a word
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    try:
        lines = StdinLines(read_fd)
        await asyncio.sleep(0.1)  # the reader meets the empty pipe (no event tells when it has)
        os.write(write_fd, b"first\n")
        assert await asyncio.wait_for(anext(lines), REPLY_TIMEOUT_S) == "first\n"
    finally:
        os.close(write_fd)
    assert await asyncio.wait_for(anext(lines, None), REPLY_TIMEOUT_S) is None
    os.close(read_fd)


async def test_a_lone_surrogate_in_a_line_nested_too_deeply_to_mend_is_a_parse_error() -> None:
    # the surrogate is the parser's first error; mending it walks the value, 600 levels deep
    hostile = (
        '{"jsonrpc": "2.0", "id": 1, "method": "ping", "a": "\\ud83d", "b": ' + "[" * 600 + "]" * 600 + "}\n"
    )
    ping = '{"jsonrpc": "2.0", "id": 2, "method": "ping"}\n'

    async def lines() -> AsyncIterator[str | Overlong]:
        for line in (hostile, ping):
            yield line

    answers: list[Any] = []

    async def send(message: SessionMessage) -> None:
        answers.append(message.message)

    screened = ScreenedLines(lines(), log=lambda _: None)
    screened.answer_on(send)
    assert await asyncio.wait_for(anext(screened), REPLY_TIMEOUT_S) == ping
    [answer] = answers
    assert answer.error.code == PARSE


async def test_a_line_is_screened_while_the_event_loop_goes_on() -> None:
    """Each check parses the whole line: seconds for one of millions of tiny objects. On the event loop
    they held up everything else, the refreshing of a directive a wait holds among it (which another
    listener then took and delivered too)."""
    big = '{"jsonrpc": "2.0", "id": 1, "method": "ping", "x": [' + ",".join(["{}"] * 500_000) + "]}\n"

    async def lines() -> AsyncIterator[str | Overlong]:
        yield big

    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    screened = ScreenedLines(lines(), log=lambda _: None)
    ticker = asyncio.create_task(tick())
    try:
        await asyncio.sleep(0)
        before = ticks
        assert await asyncio.wait_for(anext(screened), REPLY_TIMEOUT_S) == big
        during = ticks - before
    finally:
        ticker.cancel()
    assert during > 100, during


class RawClient:
    """``subagent-bus mcp`` on pipes, spoken to line by line."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.ids = iter(range(1000, 10**6))

    async def send(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line)
        await self.process.stdin.drain()

    async def reply(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), REPLY_TIMEOUT_S)
        assert line.endswith(b"\n"), f"the server closed its output: {line[:200]!r}"
        answer: dict[str, Any] = orjson.loads(line)
        return answer

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send a valid request: its answer must be the next line, with its id."""
        id_ = next(self.ids)
        message = {"jsonrpc": "2.0", "id": id_, "method": method, **({"params": params} if params else {})}
        await self.send(orjson.dumps(message) + b"\n")
        answer = await self.reply()
        assert answer["id"] == id_ and "result" in answer, answer
        result: dict[str, Any] = answer["result"]
        return result

    async def assert_served(self) -> None:
        tools = (await self.request("tools/list"))["tools"]
        assert len(tools) == 9
        assert await self.request("ping") == {}


@asynccontextmanager
async def raw_server(url: str, stderr: Path) -> AsyncIterator[RawClient]:
    with stderr.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            CLI,
            *("mcp", "--redis-url", url, "--agent-id", AGENT, "--group", GROUP_ID),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            limit=1 << 20,
        )
    client = RawClient(process)
    try:
        await client.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        )
        await client.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        yield client
        assert process.stdin is not None
        process.stdin.close()
        assert await asyncio.wait_for(process.wait(), REPLY_TIMEOUT_S) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_a_request_before_initialize_is_told_so(redis_url: str, tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        CLI,
        *("mcp", "--redis-url", redis_url, "--agent-id", AGENT, "--group", GROUP_ID),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    client = RawClient(process)
    try:
        await client.send(b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}\n')
        answer = await client.reply()
        assert (answer["id"], answer["error"]["code"]) == (1, INVALID), answer
        assert "tools/list before initialize" in answer["error"]["message"]
        hello = (
            b'"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"'
        )
        twice = b'{"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {%s, "name": "u"}}}\n' % hello
        await client.send(twice)
        assert (await client.reply())["error"]["code"] == INVALID  # refused: no initialize made
        await client.send(b'{"jsonrpc": "2.0", "id": 3, "method": "tools/list"}\n')
        assert "tools/list before initialize" in (await client.reply())["error"]["message"]
        assert await client.request("ping") == {}  # a ping is answered at any time
    finally:
        process.kill()
        await process.wait()


async def test_every_hostile_line_is_answered_and_the_server_goes_on(redis_url: str, tmp_path: Path) -> None:
    stderr = tmp_path / "stderr"
    async with raw_server(redis_url, stderr) as client:
        for line, code, id_, words in HOSTILE:
            await client.send(line + b"\n")
            answer = await client.reply()
            assert answer["jsonrpc"] == "2.0" and "result" not in answer, (line[:80], answer)
            assert (answer["id"], answer["error"]["code"]) == (id_, code), (line[:80], answer)
            for word in words:
                assert word in answer["error"]["message"], (line[:80], answer)
            await client.assert_served()
        for line, _, _ in MALFORMED_RESPONSES:  # logged, never answered: the next line answers a request
            await client.send(line + b"\n")
            await client.assert_served()
        await client.send(b"\n \r\n\t\n")  # blank lines: nothing to answer
        result = await client.request("tools/call", {"name": "report_progress", "arguments": {"percent": 7}})
        assert not result["isError"], result
        # a JavaScript string cut inside a character pair: valid JSON, no character; taken with U+FFFD
        cut = b'{"name": "report_progress", "arguments": {"percent": 8, "message": "\\ud83d cut"}}'
        await client.send(b'{"jsonrpc": "2.0", "id": 22, "method": "tools/call", "params": ' + cut + b"}\n")
        answer = await client.reply()
        assert answer["id"] == 22 and not answer["result"]["isError"], answer
        async with open_bus(redis_url) as bus:
            published = [e.payload for e in await bus.envelopes(GROUP_ID)]
            assert [p.percent for p in published if isinstance(p, Progress)] == [7, 8]
            assert [p.message for p in published if isinstance(p, Progress)] == [None, "\ufffd cut"]
    logged = stderr.read_text(encoding="utf-8")
    assert logged.count("answered -32700") == sum(code == PARSE for _, code, _, _ in HOSTILE)
    assert logged.count("answered -32600") == sum(code == INVALID for _, code, _, _ in HOSTILE)
    assert logged.count("answered -32602") == sum(code == PARAMS for _, code, _, _ in HOSTILE)
    assert "to a line of 16 bytes: this is not JSON" in logged
    assert logged.count("dropped a malformed response") == len(MALFORMED_RESPONSES)


def peak_memory_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


async def test_an_over_long_line_is_answered_at_the_limit_and_skipped_in_bounded_memory(
    redis_url: str, tmp_path: Path
) -> None:
    stderr = tmp_path / "stderr"
    async with raw_server(redis_url, stderr) as client:
        start = b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "x", "pad": "'
        await client.send(start + b"x" * (MAX_LINE_BYTES + 1 - len(start)))  # no newline yet
        answer = await client.reply()  # answered while the line is still unterminated
        assert (answer["id"], answer["error"]["code"]) == (None, INVALID), answer
        assert f"longer than the {MAX_LINE_BYTES}-byte limit" in answer["error"]["message"]
        peak = peak_memory_kib(client.process.pid)
        for _ in range(64):  # 64 MiB more of the same line, then its end and a request
            await client.send(b"y" * (1 << 20))
        await client.send(b'"}}\n{"jsonrpc": "2.0", "id": 99, "method": "ping"}\n')
        answer = await client.reply()  # no answer to the rest of the long line: the request's is next
        assert answer == {"jsonrpc": "2.0", "id": 99, "result": {}}
        assert peak_memory_kib(client.process.pid) - peak < 16 << 10  # the skipped 64 MiB were not kept
        await client.assert_served()
    assert f"to a line over {MAX_LINE_BYTES} bytes" in stderr.read_text(encoding="utf-8")


def test_a_client_gone_from_the_server_s_output_stops_it_quietly(redis_url: str, tmp_path: Path) -> None:
    """A client that crashed: the server's next reply finds no reader, and it stops without a traceback."""
    read_end, write_end = os.pipe()
    with (tmp_path / "stderr").open("wb") as log:
        process = subprocess.Popen(
            [CLI, "mcp", "--redis-url", redis_url, "--agent-id", AGENT, "--group", GROUP_ID],
            stdin=subprocess.PIPE,
            stdout=write_end,
            stderr=log,
        )
    os.close(write_end)
    try:
        assert process.stdin is not None
        hello = {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        }
        process.stdin.write(
            orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
        )
        process.stdin.write(b"\n")
        process.stdin.flush()
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = os.read(read_end, 1 << 16)
            assert chunk, "the server closed its output"
            reply += chunk
        os.close(read_end)
        process.stdin.write(b'{"jsonrpc": "2.0", "id": 2, "method": "ping"}\n')
        process.stdin.flush()
        assert process.wait(timeout=REPLY_TIMEOUT_S) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "Traceback" not in (tmp_path / "stderr").read_text(), (tmp_path / "stderr").read_text()
