"""A command whose output cannot be written (a full disk, stdout closed) says so in one line and exits 1.

Real processes of the installed console script: the errors are those of the file descriptor, and output
still buffered fails only when the interpreter flushes it at exit.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from workers.kit import connected

from bus.keys import open_namespace
from bus.settings import DEFAULT_NAMESPACE

CLI = str(Path(sys.executable).parent / "subagent-bus")
SIGNAL = (
    "Working…\n[STOP_WORK]\nagent_id: bg-task-def456\ntimestamp: 2026-01-11T09:15:00-05:00\n"
    "stop_reason: blocker\nblocker_type: external_dependency\ndetails: node_modules is missing\n[/STOP_WORK]\n"
)
FULL = "Error: cannot write the output: No space left on device"
CLOSED = "Error: cannot write the output: stdout is closed"


@pytest.fixture
def signal_file(tmp_path: Path) -> Path:
    path = tmp_path / "agent.log"
    path.write_text(SIGNAL, encoding="utf-8")
    return path


def _commands(signal_file: Path) -> dict[str, list[str]]:
    return {
        "schema": ["schema", "--list"],
        "parse": ["parse", str(signal_file)],
        "parse-json": ["parse", "--json", str(signal_file)],
        "help": ["status", "--help"],
    }


def _run(
    args: list[str], *, stdout: int | None = None, preexec_fn: Callable[[], None] | None = None, url: str = ""
) -> tuple[int, str]:
    env = {**os.environ, "SUBAGENT_BUS_REDIS_URL": url} if url else None
    process = subprocess.run(
        [CLI, *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        preexec_fn=preexec_fn,
        env=env,
        timeout=60,
        check=False,
    )
    return process.returncode, process.stderr.decode()


def _close_stdout() -> None:
    os.close(1)


@pytest.mark.parametrize("command", ["schema", "parse", "parse-json", "help"])
def test_stdout_on_a_full_device_is_a_one_line_error(signal_file: Path, command: str) -> None:
    with open("/dev/full", "wb") as full:
        code, err = _run(_commands(signal_file)[command], stdout=full.fileno())
    assert (code, err) == (1, FULL + "\n")


@pytest.mark.parametrize("command", ["schema", "parse", "parse-json", "help"])
def test_stdout_closed_at_start_is_a_one_line_error(signal_file: Path, command: str) -> None:
    """Not an AttributeError of a stdout that is None, nor (click prints nothing then) output lost with
    exit status 0."""
    code, err = _run(_commands(signal_file)[command], preexec_fn=_close_stdout)
    assert (code, err) == (1, CLOSED + "\n")


@pytest.mark.parametrize("args", [["status", "--json"], ["inbox"], ["findings", "--merged"]])
def test_a_command_of_the_bus_fails_alike(redis_url: str, args: list[str]) -> None:
    async def create() -> None:  # a namespace to show (of a missing one, a note says so on stderr)
        async with connected(redis_url) as client:
            await open_namespace(client, DEFAULT_NAMESPACE)

    asyncio.run(create())
    code, err = _run(args, preexec_fn=_close_stdout, url=redis_url)
    assert (code, err) == (1, CLOSED + "\n")
    with open("/dev/full", "wb") as full:
        code, err = _run(args, stdout=full.fileno(), url=redis_url)
    assert (code, err) == (1, FULL + "\n")


@pytest.mark.parametrize("command", ["schema", "parse", "help"])
def test_a_reader_that_closed_the_pipe_ends_the_command_quietly_with_1(
    signal_file: Path, command: str
) -> None:
    """`| head`: click's way, kept: no word, exit status 1."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        code, err = _run(_commands(signal_file)[command], stdout=write_end)
    finally:
        os.close(write_end)
    assert (code, err) == (1, "")


def test_output_that_can_be_written_is_as_before(signal_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    with out.open("wb") as stream:
        code, err = _run(["parse", str(signal_file)], stdout=stream.fileno())
    assert (code, err) == (0, "")
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines[0].split()[:3] == ["2", "STOP_WORK", "bg-task-def456"]
    assert lines[-1] == "1 signal, 0 results, 0 errors"


def test_another_os_error_is_not_taken_for_the_outputs(tmp_path: Path) -> None:
    """An error of another file with the errno of the full stdout's is a traceback still, even after stdout
    failed: the error is the output's only when it is the one stdout raised."""
    script = (
        "import errno, sys\n"
        "from bus.output import run_printing\n"
        "def command():\n"
        "    try:\n"
        "        print('some output', flush=True)\n"
        "    except OSError:\n"
        "        pass\n"
        "    raise OSError(errno.ENOSPC, 'No space left on device', 'data.rdb')\n"
        "run_printing(command)\n"
    )
    with open("/dev/full", "wb") as full:
        process = subprocess.run(
            [sys.executable, "-c", script], stdout=full, stderr=subprocess.PIPE, timeout=60, check=False
        )
    err = process.stderr.decode()
    assert process.returncode == 1
    assert "Traceback" in err
    assert "OSError: [Errno 28] No space left on device: 'data.rdb'" in err
    assert FULL not in err


@pytest.mark.parametrize("args", [[], ["--json"], ["--count", "1"]])
def test_tail_into_a_pipe_its_reader_closed_ends_with_1(
    redis_url: str, signal_file: Path, args: list[str]
) -> None:
    """`tail | head`, as the other commands: no word, exit status 1 (it said 0)."""
    published = subprocess.run(
        [CLI, "adapter", "stdin", "--agent-id", "t1", "--group", "g-pipe", "--redis-url", redis_url],
        stdin=signal_file.open("rb"),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert published.returncode == 0, published.stderr
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        tail = ["tail", "--stream", "signals", "--from", "0", "--timeout", "1", *args]
        code, err = _run(tail, stdout=write_end, url=redis_url)
    finally:
        os.close(write_end)
    assert (code, err) == (1, "")
