"""Commands that read a whole input: bounded, and a closed stdin is a clear error, not a traceback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from adapter_kit import CLI

from agents.whole_input import InputError, read_whole
from bus.errors import BusError
from bus.local_server import stop_local_server
from coordinator.view import find_request


def _cli(args: list[str], cwd: Path, *, close_stdin: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        stdin=None if close_stdin else subprocess.DEVNULL,
        preexec_fn=(lambda: os.close(0)) if close_stdin else None,
    )


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["parse"], 1, "stdin is closed: give PATH, or pipe the output in"),
        (["prompt", "--agent-id", "a1"], 2, "stdin is closed: give the task as a file, or pipe it in"),
        (["findings", "add", "--agent-id", "a1", "--group", "g"], 2, "stdin is closed"),
        (["init", "hook-task"], 1, "stdin is closed: give the hook input as a file, or pipe it in"),
        (["mcp"], 2, "stdin or stdout is closed"),
        (
            ["adapter", "run", "--agent-id", "a1", "--group", "g", "--task-file", "-", "--", "true"],
            2,
            "stdin is closed: give the task as a file, or pipe it in",
        ),
    ],
    ids=["parse", "prompt", "findings-add", "hook-task", "mcp", "task-file"],
)
def test_a_command_started_with_stdin_closed_says_so(
    tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    try:
        done = _cli(args, tmp_path, close_stdin=True)
    finally:
        stop_local_server(tmp_path / ".subagent-bus")  # a command that connects starts one
    assert done.returncode == code, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_mcp_started_with_stdout_closed_says_so(tmp_path: Path) -> None:
    try:
        done = subprocess.run(
            [CLI, "mcp"],
            check=False,
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            cwd=tmp_path,
            preexec_fn=lambda: os.close(1),
        )
    finally:
        stop_local_server(tmp_path / ".subagent-bus")  # in case it connected
    assert done.returncode == 2, done.stderr
    assert "stdin or stdout is closed" in done.stderr
    assert "Traceback" not in done.stderr and "Warning" not in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["prompt", "--agent-id", "a1", "/dev/zero"],
        ["adapter", "run", "--agent-id", "a1", "--group", "g", "--task-file", "/dev/zero", "--", "true"],
    ],
    ids=["prompt", "task-file"],
)
def test_a_task_file_that_never_ends_is_refused_at_the_limit(tmp_path: Path, args: list[str]) -> None:
    try:
        done = _cli(args, tmp_path)
    finally:
        stop_local_server(tmp_path / ".subagent-bus")
    assert done.returncode == 2, done.stderr
    assert f"the task is larger than {16 << 20} bytes" in done.stderr


def test_read_whole_reads_up_to_its_limit_and_no_further(tmp_path: Path) -> None:
    path = tmp_path / "input"
    path.write_bytes(b"x" * 10)
    assert read_whole(str(path), 10) == b"x" * 10
    with pytest.raises(InputError, match="the findings is larger than 9 bytes"):
        read_whole(str(path), 9, what="the findings")
    with pytest.raises(InputError, match=f"cannot read {tmp_path}/missing: No such file or directory"):
        read_whole(str(tmp_path / "missing"), 9)


def test_a_long_id_or_answer_is_quoted_cut_in_an_error(tmp_path: Path) -> None:
    long = "x" * 100_000
    try:
        done = _cli(["answer", "agent-1", long], tmp_path)
    finally:
        stop_local_server(tmp_path / ".subagent-bus")  # started by the connection options
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"Invalid value for ANSWERS: '{'x' * 78}… is not QUESTION_ID=answer" in done.stderr
    with pytest.raises(BusError, match="no delegation request 'xxx") as refused:
        find_request([], long)
    assert len(str(refused.value)) < 200


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["answer", "agent-1", "Q1"], "'Q1' is not QUESTION_ID=answer"),
        (["findings", "--json", "--jsonl"], "--json and --jsonl exclude each other"),
        (["findings", "--jsonl", "--merged", "--json"], "--json and --jsonl exclude each other"),
    ],
    ids=["answer-without-equals", "findings-json-jsonl", "findings-jsonl-json"],
)
def test_a_usage_error_starts_no_local_server(tmp_path: Path, args: list[str], message: str) -> None:
    try:
        done = _cli(args, tmp_path)
    finally:
        stop_local_server(tmp_path / ".subagent-bus")
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "using local Redis" not in done.stderr
    assert not (tmp_path / ".subagent-bus").exists()
