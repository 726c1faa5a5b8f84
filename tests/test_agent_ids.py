"""Agent and group ids on the agent side's command lines: an empty or unusable one is a usage error."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from bus.cli import main

DEAD_URL = "redis://127.0.0.1:1/0"  # nothing listens: a command that got past its options fails (exit 1)


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["prompt", "--agent-id", "", "-"], "--agent-id"),
        (["prompt", "--agent-id", "   ", "-"], "--agent-id"),
        (["adapter", "run", "--agent-id", "", "--group", "g", "--", "true"], "--agent-id"),
        (["adapter", "stdin", "--agent-id", "a", "--group", ""], "--group"),
        (["adapter", "watch", "out.log", "--agent-id", "", "--group", "g"], "--agent-id"),
        (["findings", "add", "--agent-id", "", "--group", "g", '{"title": "t"}'], "--agent-id"),
        (["findings", "add", "--agent-id", "a", "--group", "", '{"title": "t"}'], "--group"),
        (["adapter", "import-findings", "FILE", "--group", ""], "--group"),
        (["adapter", "import-findings", "FILE", "--group", "g", "--agent-id", ""], "--agent-id"),
        (["mcp", "--agent-id", "", "--group", "g"], "--agent-id"),
        (["listen", "--agent-id", "", "--group", "g"], "--agent-id"),
        (["listen", "--agent-id", "a", "--group", " "], "--group"),
    ],
)
def test_an_empty_or_blank_id_is_a_usage_error(args: list[str], option: str, tmp_path: Path) -> None:
    findings = tmp_path / "findings.jsonl"
    findings.write_text('{"agent": "a", "title": "t"}\n')
    args = [str(findings) if arg == "FILE" else arg for arg in args]
    result = CliRunner().invoke(main, args, input="A task.\n", env={"SUBAGENT_BUS_REDIS_URL": DEAD_URL})
    assert result.exit_code == 2, result.output
    # (env var: ...) follows the option's name where the option reads one
    assert f"Invalid value for '{option}'" in result.output and "must not be blank" in result.output


@pytest.mark.parametrize(
    ("agent_id", "message"),
    [
        ("a\nb", "must not contain control characters"),
        ("a\x7fb", "must not contain control characters"),
        ("a\x9bb", "must not contain control characters"),  # C1: a terminal's CSI
        ("x" * 257, "must be at most 256 characters"),
        ("\u200b", "must not contain invisible or line-breaking characters (U+200B)"),  # looks blank
        ("a\u2028b", "must not contain invisible or line-breaking characters (U+2028)"),
        ("a\u202eb", "must not contain invisible or line-breaking characters (U+202E)"),
    ],
)
def test_an_id_that_cannot_be_written_into_a_signal_is_a_usage_error(agent_id: str, message: str) -> None:
    result = CliRunner().invoke(main, ["prompt", "--agent-id", agent_id, "-"], input="A task.\n")
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_a_good_id_is_taken_as_it_is() -> None:
    result = CliRunner().invoke(main, ["prompt", "--agent-id", "bg-task-abc123", "-"], input="A task.\n")
    assert result.exit_code == 0, result.output
    assert "agent_id: bg-task-abc123" in result.output


@pytest.mark.parametrize("command", [["coordinator"], ["launcher", "--command", "agent {prompt}"]])
@pytest.mark.parametrize(
    ("name", "message"), [("", "must not be blank"), ("a\nb", "must not contain control characters")]
)
def test_a_process_name_that_is_blank_or_holds_a_control_character_is_a_usage_error(
    command: list[str], name: str, message: str
) -> None:
    """Not the default name in its place, nor a line break in the log lines and consumer lists."""
    result = CliRunner().invoke(main, [*command, "--name", name], env={"SUBAGENT_BUS_REDIS_URL": DEAD_URL})
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '--name': {message}" in result.output


def test_an_error_names_the_environment_variable_only_for_a_value_read_from_it() -> None:
    """A value given on the command line was blamed on a variable the user may never have set."""
    env = {
        "SUBAGENT_BUS_REDIS_URL": DEAD_URL,
        "SUBAGENT_BUS_SOCKET_TIMEOUT": None,
        "SUBAGENT_BUS_AGENT_ID": None,
    }
    given = CliRunner().invoke(main, ["status", "--socket-timeout", "1"], env=env)
    assert (
        given.exit_code == 2
        and "Invalid value for '--socket-timeout': 1.0 is not in the range" in given.output
    )
    read = CliRunner().invoke(main, ["status"], env={**env, "SUBAGENT_BUS_SOCKET_TIMEOUT": "1"})
    assert "Invalid value for '--socket-timeout' (env var: 'SUBAGENT_BUS_SOCKET_TIMEOUT'): 1.0" in read.output
    missing = CliRunner().invoke(main, ["listen", "--group", "g"], env=env)  # either would do
    assert "Missing option '--agent-id' (env var: 'SUBAGENT_BUS_AGENT_ID')" in missing.output
