"""The agent side as a user drives it: ``mcp`` in a terminal or a pipe, ``init`` in a real repository."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from adapter_kit import CLI
from click.testing import CliRunner

from agents.init import init
from agents.init_merge import MARK_START

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}


@contextmanager
def mcp_server(url: str, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """``subagent-bus mcp`` on pipes, killed at the end if it is still running."""
    server = subprocess.Popen(
        [CLI, "mcp", "--redis-url", url, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        yield server
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def initialized(server: subprocess.Popen[bytes]) -> None:
    """Send ``initialize`` and wait for its answer: the server is then reading its next line."""
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
    server.stdin.flush()
    answer = json.loads(server.stdout.readline())
    assert answer["id"] == 1 and "result" in answer, answer


def test_ctrl_c_stops_an_mcp_server_waiting_for_its_client(redis_url: str) -> None:
    with mcp_server(redis_url) as server:
        initialized(server)
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=20) == 130
        assert server.stderr is not None
        assert b"Fatal" not in server.stderr.read()


def test_ctrl_c_stops_an_mcp_server_inside_wait_for_directive(redis_url: str) -> None:
    with mcp_server(redis_url, "--agent-id", "ctrl-c", "--group", "g-ctrl-c") as server:
        initialized(server)
        assert server.stdin is not None
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "wait_for_directive", "arguments": {"timeout_seconds": 600}},
        }
        server.stdin.write(json.dumps(call).encode() + b"\n")
        server.stdin.flush()
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=20) == 130


def test_a_long_message_split_across_reads_is_one_line(redis_url: str) -> None:
    with mcp_server(redis_url, "--agent-id", "long", "--group", "g-long") as server:
        initialized(server)
        assert server.stdin is not None and server.stdout is not None
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "report_progress", "arguments": {"percent": 5, "message": "é" * 300_000}},
        }
        server.stdin.write(json.dumps(call, ensure_ascii=False).encode() + b"\n")
        server.stdin.flush()
        answer = json.loads(server.stdout.readline())
        assert answer["id"] == 2 and not answer["result"]["isError"], answer
        server.stdin.close()
        assert server.wait(timeout=20) == 0


def test_init_updates_the_file_a_symlinked_claude_md_names(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("# Our agents\n", encoding="utf-8")
    os.symlink("AGENTS.md", tmp_path / "CLAUDE.md")
    for _ in range(2):
        result = CliRunner().invoke(init, ["--dir", str(tmp_path)], catch_exceptions=False)
        assert result.exit_code == 0, result.output
    assert (tmp_path / "CLAUDE.md").is_symlink()
    shared = (tmp_path / "AGENTS.md").read_text(encoding="utf-8")
    assert shared.startswith("# Our agents\n") and shared.count(MARK_START) == 1
