"""The agent side's commands given what a careless or unlucky user gives them: a pipe where a file is
expected, a path that turns out to be a directory, an agent that ended before its output file existed,
findings whose agent field is not a usable agent id, seconds that are not a number."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from adapter_kit import exited, open_bus, run_ok, start, wait_until
from click.testing import CliRunner

from agents.findings_import import import_findings
from bus.cli import main
from bus.envelope import EnvelopeType, decode
from bus.keys import Keys, StreamKind

T = EnvelopeType
GROUP = "g-hostile-agents"


def watch_args(path: Path, agent: str, *extra: str) -> list[str]:
    return ["adapter", "watch", str(path), "--agent-id", agent, "--group", GROUP, *extra]


def published(url: str) -> list[Any]:
    keys = Keys("sbus", 8)
    client = redis.Redis.from_url(url)
    try:
        reply: Any = client.xrange(keys.stream(keys.shard_of(GROUP), StreamKind.SIGNALS))
        return [decode(fields[b"data"]) for _, fields in reply]
    finally:
        client.close()


async def test_watch_refuses_a_fifo_instead_of_hanging(redis_url: str, tmp_path: Path) -> None:
    fifo = tmp_path / "agent.out"
    os.mkfifo(fifo)  # nobody writes to it: opening it for reading would block for ever
    log = tmp_path / "adapter.log"
    adapter = start(watch_args(fifo, "w1"), redis_url, log)
    try:
        assert await exited(adapter, 30) == 1
    finally:
        if adapter.poll() is None:
            adapter.kill()
    message = log.read_text()
    assert f"cannot read {fifo}: it is a pipe or a device, not a regular file" in message
    assert "adapter stdin" in message
    assert "Traceback" not in message


async def test_watch_of_a_path_that_becomes_a_directory_names_it(redis_url: str, tmp_path: Path) -> None:
    path = tmp_path / "agent.out"
    log = tmp_path / "adapter.log"
    async with open_bus(redis_url) as bus:
        before = len(await bus.client.client_list())
        adapter = start(watch_args(path, "w2"), redis_url, log)
        try:

            async def connected() -> bool:  # past its arguments' checks: a directory now is found watching
                return len(await bus.client.client_list()) > before

            await wait_until(connected, 10, "the adapter to connect")
        except BaseException:
            adapter.kill()
            raise
    try:
        path.mkdir()
        assert await exited(adapter, 30) == 1
    finally:
        if adapter.poll() is None:
            adapter.kill()
    assert f"cannot read {path}: it is a directory, not a file" in log.read_text()


async def test_watch_of_an_agent_that_ended_before_its_file_existed(redis_url: str, tmp_path: Path) -> None:
    pid = int(await run_ok([sys.executable, "-c", "import os; print(os.getpid())"]))  # reaped: gone
    path = tmp_path / "never-written.out"
    log = tmp_path / "adapter.log"
    for _ in range(2):  # a second run publishes nothing more
        adapter = start(watch_args(path, "w3", "--pid", str(pid)), redis_url, log)
        try:
            assert await exited(adapter, 30) == 0, log.read_text()
        finally:
            if adapter.poll() is None:
                adapter.kill()
    assert [e.type for e in published(redis_url)] == [T.AGENT_STARTED, T.AGENT_EXITED]
    assert f"process {pid} ended before {path} existed" in log.read_text()


def test_import_findings_refuses_a_pipe_with_a_clear_error(redis_url: str) -> None:
    read, write = os.pipe()
    try:
        os.write(write, orjson.dumps({"agent": "a", "title": "t"}) + b"\n")
        os.close(write)
        result = CliRunner().invoke(
            import_findings, ["--redis-url", redis_url, f"/dev/fd/{read}", "--group", GROUP]
        )
    finally:
        os.close(read)
    assert result.exit_code == 1
    assert "it is a pipe or a device, not a regular file" in result.output
    assert "findings add -" in result.output
    assert published(redis_url) == []


def test_import_findings_skips_agent_ids_that_are_not_usable(redis_url: str, tmp_path: Path) -> None:
    path = tmp_path / "findings.jsonl"
    rows = [
        {"agent": "a\nb", "id": "SEC-001", "title": "newline in the agent"},
        {"agent": "\u0000", "id": "SEC-002", "title": "NUL as the agent"},
        {"agent": "x" * 300, "id": "SEC-003", "title": "too long"},
        {"agent": "ok", "id": "SEC-004", "title": "fine"},
    ]
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    result = CliRunner().invoke(import_findings, ["--redis-url", redis_url, str(path), "--group", GROUP])
    assert result.exit_code == 2, result.output
    assert f"{path}:1: agent id 'a\\nb' must not contain control characters" in result.output
    assert f"{path}:2: agent id '\\x00' must not contain control characters" in result.output
    assert f"{path}:3: agent id " in result.output and "at most 256 characters" in result.output
    assert "imported 1 finding(s); 3 bad line(s)" in result.output
    assert [e.agent_id for e in published(redis_url)] == ["ok"]


@pytest.mark.parametrize(
    "args",
    [
        ["listen", "--agent-id", "a", "--group", "g", "--timeout", "nan"],
        ["listen", "--agent-id", "a", "--group", "g", "--timeout", "inf"],
        ["adapter", "watch", "out.log", "--agent-id", "a", "--group", "g", "--poll", "nan"],
        ["adapter", "stdin", "--agent-id", "a", "--group", "g", "--heartbeat", "inf"],
        ["launcher", "--command", "agent {prompt_file}", "--heartbeat", "nan"],
        ["mcp", "--agent-id", "a", "--group", "g", "--publish-timeout", "nan"],
        ["listen", "--agent-id", "a", "--group", "g", "--timeout", "1e308"],
        ["adapter", "stdin", "--agent-id", "a", "--group", "g", "--heartbeat", "2e9"],
        ["tail", "--timeout", "1e10"],
    ],
)
def test_seconds_that_are_not_a_finite_number_are_a_usage_error(args: list[str]) -> None:
    end = args.index("--") if "--" in args else len(args)  # the options end there: the rest is the agent's
    result = CliRunner().invoke(main, [*args[:end], "--redis-url", "redis://127.0.0.1:1/0", *args[end:]])
    assert result.exit_code == 2, result.output
    assert "is not a finite number" in result.output or "is more than 1e+09 seconds" in result.output


def test_bad_log_levels_and_demo_directories_are_usage_errors(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    for args, message in (
        (["coordinator", "--log-level", "bogus"], "Invalid value for '--log-level'"),
        (["demo", "--workdir", str(tmp_path / "afile" / "sub")], "cannot create"),
    ):
        result = CliRunner().invoke(main, [*args, "--redis-url", "redis://127.0.0.1:1/0"])
        assert result.exit_code == 2, result.output
        assert message in result.output
    shown = CliRunner().invoke(main, ["coordinator", "--log-level", "DEBUG", "--help"])
    assert shown.exit_code == 0
    assert "[debug|info|warning|error]" in shown.output and "[default: info]" in shown.output  # one case


@pytest.mark.parametrize("pid", ["0", "-1"])
def test_a_pid_that_names_no_single_process_is_a_usage_error(pid: str) -> None:
    # The liveness check signals the pid: 0 and negatives name process groups, which were always "alive".
    args = ["adapter", "watch", "out.log", "--agent-id", "a", "--group", "g", "--pid", pid]
    end = args.index("--") if "--" in args else len(args)  # the options end there: the rest is the agent's
    result = CliRunner().invoke(main, [*args[:end], "--redis-url", "redis://127.0.0.1:1/0", *args[end:]])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--pid'" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["adapter", "run", "--agent-id", "a", "--group", "g", "--until-complete",
             "--deliver", "command:no-such-resume-program --resume {session_id} {prompt}", "--", "touch", "ran"],
            "Invalid value for '--deliver': 'no-such-resume-program' is not a program on PATH",
        ),
        (
            ["adapter", "stdin", "--agent-id", "a", "--group", "g", "--deliver", "command:./resume.txt {prompt}"],
            "Invalid value for '--deliver': ./resume.txt is not an executable file",
        ),
        (
            ["launcher", "--command", "no-such-agent -p {prompt}"],
            "Invalid value for '--command': 'no-such-agent' is not a program on PATH",
        ),
        (
            ["launcher", "--command", "touch {prompt_file}", "--deliver", "command:./missing/resume {prompt}"],
            "Invalid value for '--deliver': ./missing/resume is not an executable file",
        ),
        (
            ["adapter", "run", "--agent-id", "a", "--group", "g", "--deliver", "file:missing/responses.md", "--", "touch", "ran"],
            "Invalid value for '--deliver': the directory of missing/responses.md does not exist",
        ),
        (
            ["adapter", "run", "--agent-id", "a", "--group", "g", "--deliver", "file:answers.fifo", "--", "touch", "ran"],
            "Invalid value for '--deliver': answers.fifo is not a regular file (a pipe, a socket or a device)",
        ),
        (
            ["launcher", "--command", "touch {prompt_file}", "--deliver", "print"],
            "Invalid value for '--deliver': print would write each directive into the agent's log",
        ),
        (
            ["launcher", "--command", "touch {prompt_file}", "--deliver", "file:."],
            "Invalid value for '--deliver': file:. would be one file for every agent the launcher starts",
        ),
        (
            ["launcher", "--command", "touch {prompt_file}", "--deliver", "file:missing/{agent_id}.md"],
            "Invalid value for '--deliver': the directory of missing/{agent_id}.md does not exist",
        ),
        (
            ["adapter", "run", "--agent-id", "a", "--group", "g", "--stderr-log", "missing/stderr.log", "--", "touch", "ran"],
            "Invalid value for '--stderr-log': cannot append to missing/stderr.log: No such file or directory",
        ),
        (
            ["adapter", "run", "--agent-id", "a", "--group", "g", "--task-file", "latin1.md", "--", "touch", "ran"],
            "Invalid value for --task-file: latin1.md is not UTF-8 (byte 4)",
        ),
        (
            ["launcher", "--command", "touch {prompt_file}", "--prompt-dir", "resume.txt/prompts"],
            "Invalid value for '--prompt-dir': cannot make resume.txt/prompts: Not a directory",
        ),
        (
            ["launcher", "--command", "touch {prompt_file}", "--prompt-dir", "prompts", "--log-dir", "resume.txt/logs"],
            "Invalid value for '--log-dir': cannot make resume.txt/logs: Not a directory",
        ),
    ],
)  # fmt: skip
def test_a_program_that_cannot_start_is_a_usage_error_before_anything_runs(
    args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without the check, an adapter waiting for its agent to complete waited for ever once every
    # delivery had failed, and a launcher failed every request.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "resume.txt").write_text("not executable")
    (tmp_path / "latin1.md").write_bytes("Fix \xe9t\xe9".encode("latin-1"))
    os.mkfifo(tmp_path / "answers.fifo")
    end = args.index("--") if "--" in args else len(args)  # the options end there: the rest is the agent's
    result = CliRunner().invoke(main, [*args[:end], "--redis-url", "redis://127.0.0.1:1/0", *args[end:]])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not (tmp_path / "ran").exists()
    assert not (tmp_path / ".subagent-bus").exists()


def test_a_program_named_by_a_placeholder_is_checked_per_directive_not_at_start(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["adapter", "stdin", "--agent-id", "a", "--group", "g", "--deliver", "command:{session_id} {prompt}",
         "--redis-url", "redis://127.0.0.1:1/0"],
        input="",
    )  # fmt: skip
    assert "--deliver" not in result.output, result.output
    assert "Redis unavailable" in result.output
