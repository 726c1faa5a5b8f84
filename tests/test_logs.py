"""Log lines: one per record in text (what an agent sent cannot start a line of its own), the fields
as they are in JSON."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from bus.local_server import stop_local_server
from bus.logs import PLAIN_FORMAT, setup_logging

CLI = str(Path(sys.executable).parent / "subagent-bus")

HOSTILE = "a\nb\x1b[2J"


@pytest.fixture(autouse=True)
def _root_logger_restored() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level


@pytest.mark.parametrize("text_format", [None, PLAIN_FORMAT], ids=["timestamped", "plain"])
def test_a_text_line_escapes_what_an_agent_sent(capsys: pytest.CaptureFixture[str], text_format: str) -> None:
    setup_logging(text_format=text_format)
    logging.getLogger("t").warning("registered %s", HOSTILE, extra={"agent_id": HOSTILE})
    [line] = capsys.readouterr().err.splitlines()
    assert "registered a\\nb\\x1b[2J" in line
    assert ("agent_id=a\\nb\\x1b[2J" in line) is (text_format is None)


def test_a_traceback_keeps_its_lines(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging()
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("t").exception("failed for %s", HOSTILE)
    lines = capsys.readouterr().err.splitlines()
    assert "failed for a\\nb\\x1b[2J" in lines[0]
    assert lines[1] == "Traceback (most recent call last):" and lines[-1] == "ValueError: boom"


def test_json_keeps_the_values(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging(json=True)
    logging.getLogger("t").warning("registered %s", HOSTILE, extra={"agent_id": HOSTILE})
    record = orjson.loads(capsys.readouterr().err)
    assert record["message"] == f"registered {HOSTILE}" and record["agent_id"] == HOSTILE


@pytest.mark.parametrize(
    "command",
    [
        ["coordinator", "--burst"],
        ["launcher", "--burst", "--command", "true"],
        ["adapter", "stdin", "--agent-id", "a-log", "--group", "g-log"],
    ],
)
def test_with_log_json_the_local_server_line_is_json_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SUBAGENT_BUS_REDIS_URL", raising=False)
    try:
        done = subprocess.run(
            [CLI, *command, "--log-json"],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, done.stderr
        lines = [orjson.loads(line) for line in done.stderr.splitlines()]  # every line is JSON
        assert lines[0]["message"].startswith("using local Redis at redis://127.0.0.1:")
        assert lines[0]["level"] == "info" and lines[0]["logger"] == "subagent_bus.connection"
        if command[0] == "adapter":  # every line of an adapter carries its agent's ids
            assert all((line["agent_id"], line["group_id"]) == ("a-log", "g-log") for line in lines), lines
    finally:
        stop_local_server(tmp_path / ".subagent-bus")
