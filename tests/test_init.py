"""``subagent-bus init``: merged, idempotent, hand edits kept unless --force, no secrets written."""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from adapter_kit import CLI, logged, open_bus, wait_until
from click.testing import CliRunner, Result

from agents import init as init_module
from agents.identity import IDENTITY_STATEMENT, RESULT_TEMPLATE, SIGNAL_TEMPLATES
from agents.init import HOOK_MATCHER, URL_REFERENCE, hook_entry, init, server_entry
from agents.init_merge import MARK_END, MARK_START
from agents.orphans import Proc
from agents.parser import parse_text
from agents.task_hook import HOOK_COMMAND
from bus.embedded import RedisProcess
from bus.envelope import EnvelopeType

FILES = (".mcp.json", "CLAUDE.md", ".claude/settings.json")


def run_init(directory: Path, *args: str) -> Result:
    return CliRunner().invoke(init, ["--dir", str(directory), *args], catch_exceptions=False)


def snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def test_init_in_an_empty_repository(tmp_path: Path) -> None:
    result = run_init(tmp_path)
    assert result.exit_code == 0, result.output
    for name in FILES:
        assert f"created {name}" in result.output
    assert load(tmp_path / ".mcp.json") == {
        "mcpServers": {"subagent-bus": {"type": "stdio", "command": "subagent-bus", "args": ["mcp"]}}
    }
    claude = (tmp_path / "CLAUDE.md").read_text(encoding="utf-8")
    assert claude.startswith(MARK_START) and claude.endswith(MARK_END + "\n")
    assert IDENTITY_STATEMENT in claude
    for template in SIGNAL_TEMPLATES:
        assert template in claude
    assert "subagent-bus listen" in claude and "wait_for_directive" in claude
    assert RESULT_TEMPLATE in claude and "pass the report to `submit_result`" in claude
    assert parse_text(claude) == []  # templates only
    hooks = load(tmp_path / ".claude/settings.json")["hooks"]
    assert hooks == {"PostToolUse": [hook_entry()]}
    assert hooks["PostToolUse"][0]["matcher"] == HOOK_MATCHER
    assert hooks["PostToolUse"][0]["hooks"][0]["command"] == HOOK_COMMAND


def test_init_merges_into_existing_files_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    other_server = {"command": "other-server", "args": ["--stdio"]}
    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": {"other": other_server}}))
    (tmp_path / "CLAUDE.md").write_text("# Project rules\n\nUse tabs.\n")
    (tmp_path / ".claude").mkdir()
    bash_hook = {"matcher": "Bash", "hooks": [{"type": "command", "command": "echo bash"}]}
    stop_hook = {"hooks": [{"type": "command", "command": "echo stop"}]}
    settings = {
        "permissions": {"allow": ["Read"]},
        "hooks": {"PostToolUse": [bash_hook], "Stop": [stop_hook]},
    }
    (tmp_path / ".claude/settings.json").write_text(json.dumps(settings))

    first = run_init(tmp_path)
    assert first.exit_code == 0, first.output
    for name in FILES:
        assert f"updated {name}" in first.output
    servers = load(tmp_path / ".mcp.json")["mcpServers"]
    assert servers == {"other": other_server, "subagent-bus": server_entry(None)}
    claude = (tmp_path / "CLAUDE.md").read_text()
    assert claude.startswith("# Project rules\n\nUse tabs.\n\n" + MARK_START)
    merged = load(tmp_path / ".claude/settings.json")
    assert merged["permissions"] == {"allow": ["Read"]}
    assert merged["hooks"] == {"PostToolUse": [bash_hook, hook_entry()], "Stop": [stop_hook]}

    before = snapshot(tmp_path)
    second = run_init(tmp_path)
    assert second.exit_code == 0, second.output
    assert "nothing to change" in second.output
    for name in FILES:
        assert f"unchanged {name}" in second.output
    assert snapshot(tmp_path) == before


def test_a_hand_edited_section_is_refused_without_force_and_replaced_with_it(tmp_path: Path) -> None:
    assert run_init(tmp_path).exit_code == 0
    claude = tmp_path / "CLAUDE.md"
    edited = claude.read_text().replace("Use the tools", "Please use the tools")
    assert edited.count("Please use the tools") == 1
    edited = "Intro kept.\n\n" + edited + "\nOutro kept.\n"
    claude.write_text(edited)
    (tmp_path / ".mcp.json").unlink()
    before = snapshot(tmp_path)

    refused = run_init(tmp_path)
    assert refused.exit_code == 1
    assert "CLAUDE.md" in refused.output and "--force" in refused.output
    assert "nothing was written" in refused.output
    assert snapshot(tmp_path) == before  # not even the missing .mcp.json

    forced = run_init(tmp_path, "--force")
    assert forced.exit_code == 0, forced.output
    text = claude.read_text()
    assert "Please use the tools" not in text
    assert text.startswith("Intro kept.\n\n" + MARK_START)
    assert text.endswith(MARK_END + "\n\nOutro kept.\n")
    assert (tmp_path / ".mcp.json").exists()
    assert run_init(tmp_path).output.count("unchanged") == 4


def test_another_subagent_bus_server_or_hook_needs_force(tmp_path: Path) -> None:
    mine = {"command": "/opt/bin/subagent-bus", "args": ["mcp", "--namespace", "x"]}
    (tmp_path / ".mcp.json").write_text(
        json.dumps({"mcpServers": {"subagent-bus": mine, "o": {"command": "o"}}})
    )
    (tmp_path / ".claude").mkdir()
    old_hook = {"matcher": "Task", "hooks": [{"type": "command", "command": f"{HOOK_COMMAND} --group g"}]}
    (tmp_path / ".claude/settings.json").write_text(json.dumps({"hooks": {"PostToolUse": [old_hook]}}))

    refused = run_init(tmp_path)
    assert refused.exit_code == 1
    assert ".mcp.json" in refused.output and ".claude/settings.json" in refused.output
    assert not (tmp_path / "CLAUDE.md").exists()

    forced = run_init(tmp_path, "--force")
    assert forced.exit_code == 0, forced.output
    assert load(tmp_path / ".mcp.json")["mcpServers"] == {
        "subagent-bus": server_entry(None),
        "o": {"command": "o"},
    }
    assert load(tmp_path / ".claude/settings.json")["hooks"]["PostToolUse"] == [hook_entry()]


def test_damaged_markers_and_invalid_json_are_refused_even_with_force(tmp_path: Path) -> None:
    (tmp_path / "CLAUDE.md").write_text(f"{MARK_START}\nhalf a section\n")
    (tmp_path / ".mcp.json").write_text("{not json")
    before = snapshot(tmp_path)
    result = run_init(tmp_path, "--force")
    assert result.exit_code == 1
    assert "markers are damaged" in result.output and "not valid JSON" in result.output
    assert snapshot(tmp_path) == before


def test_files_of_another_shape_or_encoding_are_refused_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / ".mcp.json").write_text('["a list, not an object"]')
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude/settings.json").write_text('{"hooks": ["not", "an", "object"]}')
    (tmp_path / "CLAUDE.md").write_bytes(b"# Notes\n\xff\xfe not UTF-8\n")
    before = snapshot(tmp_path)
    result = run_init(tmp_path, "--force")
    assert result.exit_code == 1
    assert "it is not a JSON object of" in result.output
    assert "its 'hooks' is not a JSON object" in result.output
    assert "CLAUDE.md" in result.output and "cannot be read" in result.output
    assert snapshot(tmp_path) == before


def test_json_that_names_a_key_twice_is_refused_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / ".mcp.json").write_text('{"mcpServers": {"x": {"command": "x"}, "x": {"command": "y"}}}')
    before = snapshot(tmp_path)
    result = run_init(tmp_path)
    assert result.exit_code == 1
    assert ".mcp.json: it names the key 'x' twice in one object; fix it by hand" in result.output
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ('{"x": 1e400}', "its number 1e400 is beyond a double's range: written back, it would be Infinity"),
        ('{"x": 1.10}', "its number 1.10 would be written back as 1.1; write it so, or fix it by hand"),
        ('{"x": -0}', "its number -0 would be written back as 0; write it so, or fix it by hand"),
        ('{"x": NaN}', "it holds NaN, which is no JSON; fix it by hand"),
        ('{"x": ' + "9" * 5000 + "}", "it cannot be read as JSON here (Exceeds the limit"),
        ('{"x": "\\ud83d"}', "it holds a lone surrogate escape (\\udXXX), which init cannot write back"),
    ],
    ids=["beyond-a-double", "not-as-written", "minus-zero", "nan", "long-integer", "lone-surrogate"],
)
def test_json_that_would_not_be_written_back_as_it_is_is_refused_and_left_alone(
    tmp_path: Path, settings: str, said: str
) -> None:
    """Python reads these; written back, ``1e400`` was ``Infinity``, which Claude Code cannot read (the
    whole file lost to it), and the others a traceback, with temporary files left in the repository."""
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude/settings.json").write_text(settings)
    before = snapshot(tmp_path)
    result = run_init(tmp_path)
    assert result.exit_code == 1, result.output
    assert f".claude/settings.json: {said}" in result.output
    assert snapshot(tmp_path) == before
    assert sorted(p.name for p in tmp_path.rglob("*")) == [".claude", "settings.json"]


@pytest.mark.parametrize("entry", ['"disabled"', "[]"])
def test_a_subagent_bus_server_entry_that_is_no_object_needs_force(tmp_path: Path, entry: str) -> None:
    """Not a traceback (where a run without --url looks for the URL an earlier run wrote)."""
    (tmp_path / ".mcp.json").write_text(f'{{"mcpServers": {{"subagent-bus": {entry}}}}}')
    refused = run_init(tmp_path)
    assert refused.exit_code == 1, refused.output
    assert "its mcpServers.subagent-bus differs from what init writes; --force replaces it" in refused.output
    assert run_init(tmp_path, "--force").exit_code == 0


def test_json_nested_too_deeply_is_refused_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / ".mcp.json").write_text("[" * 100_000)
    before = snapshot(tmp_path)
    result = run_init(tmp_path)
    assert result.exit_code == 1
    assert ".mcp.json: it is nested too deeply to be read as JSON; fix it by hand" in result.output
    assert snapshot(tmp_path) == before


def test_a_fifo_a_directory_or_an_oversized_file_in_place_of_a_file_is_refused_and_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.mkfifo(tmp_path / "CLAUDE.md")  # read, it would wait for a writer forever
    (tmp_path / ".mcp.json").mkdir()
    (tmp_path / ".gitignore").write_text("x" * 101)
    monkeypatch.setattr(init_module, "MAX_FILE_BYTES", 100)
    before = snapshot(tmp_path)
    result = run_init(tmp_path)
    assert result.exit_code == 1
    lines = result.output.splitlines()
    refused = "it is not a regular file (a FIFO, a device or a directory): init edits files only"
    assert f"CLAUDE.md: {refused}" in lines
    assert f".mcp.json: {refused}" in lines
    assert ".gitignore: it is larger than 100 bytes, which is no file init edits" in lines
    assert snapshot(tmp_path) == before


def test_links_out_of_the_repository_and_read_only_files_are_refused(tmp_path: Path) -> None:
    repo, outside = tmp_path / "repo", tmp_path / "home"
    (repo / ".claude").mkdir(parents=True)
    outside.mkdir()
    (outside / "bashrc").write_text("alias ll='ls -l'\n")
    (repo / ".gitignore").symlink_to("../home/bashrc")
    (repo / ".claude/settings.json").symlink_to("../../home/.claude/settings.json")  # dangling
    (repo / ".mcp.json").write_text("{}")
    (repo / ".mcp.json").chmod(0o444)
    (repo / "CLAUDE.md").symlink_to("CLAUDE.md")  # a loop
    before = snapshot(tmp_path)
    refused = run_init(repo, "--force")
    assert refused.exit_code == 1
    lines = refused.output.splitlines()
    assert (
        f".gitignore: it leads out of the repository (to {outside / 'bashrc'}); init does not write there"
        in lines
    )
    assert any(line.startswith(".claude/settings.json: it leads out of the repository") for line in lines)
    assert ".mcp.json: it is read-only; make it writable for init to update it" in lines
    assert any(line.startswith("CLAUDE.md: it cannot be followed: ") for line in lines), lines
    assert snapshot(tmp_path) == before
    assert not (outside / ".claude").exists()


def test_a_byte_order_mark_is_read_past(tmp_path: Path) -> None:
    (tmp_path / ".mcp.json").write_bytes(b'\xef\xbb\xbf{"mcpServers": {"o": {"command": "o"}}}')
    done = run_init(tmp_path)
    assert done.exit_code == 0, done.output
    assert (tmp_path / ".mcp.json").read_bytes().startswith(b"\xef\xbb\xbf{")  # kept, as the user had it
    servers = json.loads((tmp_path / ".mcp.json").read_text(encoding="utf-8-sig"))["mcpServers"]
    assert set(servers) == {"o", "subagent-bus"}


def test_the_lines_of_the_users_files_keep_their_ends_and_byte_order_mark(tmp_path: Path) -> None:
    (tmp_path / "CLAUDE.md").write_bytes(b"\xef\xbb\xbf# My project\r\n\r\nRules here.\r\n")
    (tmp_path / ".gitignore").write_bytes(b"node_modules\r\ndist\r\n")
    done = run_init(tmp_path)
    assert done.exit_code == 0, done.output
    claude, ignored = (tmp_path / "CLAUDE.md").read_bytes(), (tmp_path / ".gitignore").read_bytes()
    assert claude.startswith(b"\xef\xbb\xbf# My project\r\n\r\nRules here.\r\n")
    assert MARK_START.encode() in claude
    assert ignored.startswith(b"node_modules\r\ndist\r\n")
    for text in (claude, ignored):
        assert text.count(b"\n") == text.count(b"\r\n")
    again = snapshot(tmp_path)
    assert run_init(tmp_path).exit_code == 0
    assert snapshot(tmp_path) == again


def test_a_file_that_cannot_be_written_leaves_the_others_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tempfile.mkstemp
    calls = 0

    def third_fails(*args: Any, **kwargs: Any) -> tuple[int, str]:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise OSError(errno.ENOSPC, "No space left on device", str(kwargs.get("dir")))
        return real(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", third_fails)
    failed = run_init(tmp_path)
    assert failed.exit_code == 1
    assert "No space left on device (nothing was written)" in failed.output
    assert snapshot(tmp_path) == {}  # nor a temporary file left behind
    monkeypatch.undo()
    assert run_init(tmp_path).exit_code == 0


def test_a_url_with_a_password_is_never_written(tmp_path: Path) -> None:
    result = run_init(tmp_path, "--url", "redis://agent:s3cret@redis.internal:6379/0")
    assert result.exit_code == 0, result.output
    entry = load(tmp_path / ".mcp.json")["mcpServers"]["subagent-bus"]
    assert entry["env"] == {"SUBAGENT_BUS_REDIS_URL": URL_REFERENCE}
    assert all(b"s3cret" not in content for content in snapshot(tmp_path).values())
    assert "s3cret" not in result.output
    assert "export it" in result.output

    for n, url in enumerate(
        (
            "redis+sentinel://s1:26379/mymaster?sentinel_password=hush",
            "rediss://h:6379/0?ssl_password=hush",
            "redis://h:6379/0?pass%77ord=hush",  # the name decoded, as redis-py decodes it
        )
    ):
        other = tmp_path / f"other-{n}"
        other.mkdir()
        query = run_init(other, "--url", url)
        assert query.exit_code == 0, query.output
        assert load(other / ".mcp.json")["mcpServers"]["subagent-bus"]["env"] == {
            "SUBAGENT_BUS_REDIS_URL": URL_REFERENCE
        }
        assert "hush" not in query.output


def initialized_with_urls(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    """(url, what .mcp.json holds of it, a directory init was run in with ``--url url``): a URL with a
    password, then one without."""
    for url, written in (
        ("redis://agent:s3cret@redis.internal:6379/0", URL_REFERENCE),
        ("redis://redis.internal:6379/2", "redis://redis.internal:6379/2"),
    ):
        directory = tmp_path / written.replace("/", "_")
        directory.mkdir()
        assert run_init(directory, "--url", url).exit_code == 0
        yield url, written, directory


def test_a_run_without_url_keeps_the_url_an_earlier_run_wrote(tmp_path: Path) -> None:
    for _, written, directory in initialized_with_urls(tmp_path):
        before = snapshot(directory)
        again = run_init(directory)
        assert again.exit_code == 0, again.output
        assert "mcpServers.subagent-bus up to date (its SUBAGENT_BUS_REDIS_URL kept)" in again.output
        assert snapshot(directory) == before
        entry = load(directory / ".mcp.json")["mcpServers"]["subagent-bus"]
        assert entry["env"] == {"SUBAGENT_BUS_REDIS_URL": written}
        other = run_init(directory, "--url", "redis://elsewhere:6379/0")  # what init wrote: no --force
        assert other.exit_code == 0, other.output
        assert "mcpServers.subagent-bus: URL set" in other.output
        assert load(directory / ".mcp.json")["mcpServers"]["subagent-bus"] == server_entry(
            "redis://elsewhere:6379/0"
        )
        hooks = load(directory / ".claude/settings.json")["hooks"]["PostToolUse"]
        assert hooks == [hook_entry("redis://elsewhere:6379/0")]


@pytest.mark.parametrize("lost", [".claude/settings.json", ".mcp.json"])
def test_a_file_lost_since_a_run_with_url_gets_the_url_the_other_kept(tmp_path: Path, lost: str) -> None:
    """Else the hook's adapters would publish to the local Redis while the MCP server reads the URL's
    (a fresh clone of a repository that commits one of the two files)."""
    url = "redis://10.0.0.5:6379/0"
    assert run_init(tmp_path, "--url", url).exit_code == 0
    (tmp_path / lost).unlink()
    again = run_init(tmp_path)
    assert again.exit_code == 0, again.output
    assert load(tmp_path / ".mcp.json")["mcpServers"]["subagent-bus"] == server_entry(url)
    assert load(tmp_path / ".claude/settings.json")["hooks"]["PostToolUse"] == [hook_entry(url)]


def test_force_without_url_replaces_hand_edits_but_keeps_the_url_an_earlier_run_wrote(tmp_path: Path) -> None:
    """Else the MCP server would read the local Redis and the hook's adapters publish to the URL's."""
    for url, _, directory in initialized_with_urls(tmp_path):
        mcp = load(directory / ".mcp.json")
        mcp["mcpServers"]["subagent-bus"]["args"] = ["mcp", "--workdir", "."]  # edited by hand
        (directory / ".mcp.json").write_text(json.dumps(mcp))
        settings = load(directory / ".claude/settings.json")
        [group] = settings["hooks"]["PostToolUse"]
        group["hooks"][0]["timeout"] = 99
        words = shlex.split(group["hooks"][0]["command"])  # an option of one's own before --redis-url
        group["hooks"][0]["command"] = shlex.join([*words[:3], "--log-dir", "logs", *words[3:]])
        (directory / ".claude/settings.json").write_text(json.dumps(settings))
        forced = run_init(directory, "--force")
        assert forced.exit_code == 0, forced.output
        assert "mcpServers.subagent-bus replaced (its SUBAGENT_BUS_REDIS_URL kept)" in forced.output
        assert load(directory / ".mcp.json")["mcpServers"]["subagent-bus"] == server_entry(url)
        hooks = load(directory / ".claude/settings.json")["hooks"]["PostToolUse"]
        assert hooks == [hook_entry(url)], forced.output


def test_a_url_given_later_reaches_the_mcp_server_and_the_hook(tmp_path: Path) -> None:
    assert run_init(tmp_path).exit_code == 0
    url = "redis://redis.internal:6379/2?client_name=a b"
    later = run_init(tmp_path, "--url", url)
    assert later.exit_code == 0, later.output
    assert "PostToolUse hook: URL set" in later.output
    [group] = load(tmp_path / ".claude/settings.json")["hooks"]["PostToolUse"]
    [command] = [hook["command"] for hook in group["hooks"]]
    assert shlex.split(command) == [*HOOK_COMMAND.split(), "--redis-url", url]
    assert run_init(tmp_path).output.count("unchanged") == 4  # a run without --url keeps it
    secret = run_init(tmp_path, "--url", "redis://u:hush@h:6379/0")  # from the environment, then
    assert secret.exit_code == 0, secret.output
    assert load(tmp_path / ".claude/settings.json")["hooks"]["PostToolUse"] == [hook_entry()]
    assert "hush" not in (tmp_path / ".claude/settings.json").read_text()


def test_a_url_without_password_is_written(tmp_path: Path) -> None:
    assert run_init(tmp_path, "--url", "redis://redis.internal:6379/2").exit_code == 0
    env = load(tmp_path / ".mcp.json")["mcpServers"]["subagent-bus"]["env"]
    assert env == {"SUBAGENT_BUS_REDIS_URL": "redis://redis.internal:6379/2"}
    bad = CliRunner().invoke(init, ["--dir", str(tmp_path), "--url", "http://nope"])
    assert bad.exit_code == 2
    assert "unsupported URL scheme" in bad.output


def test_codex_gets_agents_md_and_a_config_snippet(tmp_path: Path) -> None:
    result = run_init(tmp_path, "--agent", "codex")
    assert result.exit_code == 0, result.output
    assert sorted(snapshot(tmp_path)) == [".gitignore", "AGENTS.md"]
    agents = (tmp_path / "AGENTS.md").read_text()
    assert IDENTITY_STATEMENT in agents
    assert "[mcp_servers.subagent-bus]" in result.output
    (tmp_path / "q").mkdir()
    (tmp_path / "s").mkdir()
    quoted = run_init(tmp_path / "q", "--agent", "codex", "--url", 'unix:///tmp/x y"z.sock')
    assert 'env = { SUBAGENT_BUS_REDIS_URL = "unix:///tmp/x y\\"z.sock" }' in quoted.output  # valid TOML
    secret = run_init(tmp_path / "s", "--agent", "codex", "--url", "redis://u:hush@h:6379/0")
    assert "hush" not in secret.output and 'in its env: { SUBAGENT_BUS_REDIS_URL = "..." }' in secret.output


def test_the_local_servers_data_is_ignored_by_git(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("node_modules/")  # no newline at its end
    assert run_init(tmp_path).exit_code == 0
    assert (tmp_path / ".gitignore").read_text() == "node_modules/\n.subagent-bus/\n"
    again = run_init(tmp_path)
    assert "unchanged .gitignore (.subagent-bus/ already ignored)" in again.output
    assert (tmp_path / ".gitignore").read_text() == "node_modules/\n.subagent-bus/\n"


def test_one_instructions_file_serves_claude_code_and_codex(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("# Team rules\n")
    (tmp_path / "CLAUDE.md").symlink_to("AGENTS.md")
    for kind in ("claude-code", "codex", "claude-code"):
        done = run_init(tmp_path, "--agent", kind)
        assert done.exit_code == 0, (kind, done.output)
    assert (tmp_path / "AGENTS.md").read_text().count(IDENTITY_STATEMENT) == 1


# -- the Task hook ------------------------------------------------------------------------------------


def hook(
    stdin: bytes, cwd: Path, url: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [CLI, "init", "hook-task", *args],
        input=stdin,
        cwd=cwd,
        capture_output=True,
        timeout=60,
        check=False,
        env={
            **{name: value for name, value in os.environ.items() if name != "CLAUDE_PROJECT_DIR"},
            "SUBAGENT_BUS_REDIS_URL": url,
            **(env or {}),
        },
    )


async def test_the_task_hook_puts_a_background_agent_on_the_bus(redis_url: str, tmp_path: Path) -> None:
    output = tmp_path / "output-agent-xyz.md"
    output.write_text(
        "Working...\n[COMPLETION_REPORT]\nagent_id: agent-xyz\nstatus: success\nsummary: Found the files\n"
        "[/COMPLETION_REPORT]\n"
    )
    call = {
        "session_id": "session-1",
        "cwd": str(tmp_path),
        "hook_event_name": "PostToolUse",
        "tool_name": "Task",
        "tool_input": {"subagent_type": "Explore", "prompt": "Find auth files", "run_in_background": True},
        "tool_response": {"status": "async_launched", "agentId": "agent-xyz", "outputFile": str(output)},
    }
    # A metrics port in the hook's environment is not handed down: each adapter would need its own,
    # and this one is taken.
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        done = hook(json.dumps(call).encode(), tmp_path, redis_url, env={"SUBAGENT_BUS_METRICS_PORT": port})
        assert done.returncode == 0, done.stderr
        assert b"following agent-xyz (group session-1)" in done.stdout
        async with open_bus(redis_url) as bus:

            async def completed() -> bool:
                return await bus.has("session-1", EnvelopeType.COMPLETION_REPORT)

            await wait_until(completed, 30, "the adapter to publish the completion report")
    async with open_bus(redis_url) as bus:
        [started] = await bus.of_type("session-1", EnvelopeType.AGENT_STARTED)
        assert started.agent_id == "agent-xyz"
    logs = tmp_path / ".subagent-bus/hooks"
    assert (logs / "agent-xyz.prompt.md").read_text() == "Find auth files"  # passed as --task-file
    assert (logs / "agent-xyz.log").exists()


async def test_a_resumed_agent_is_followed_by_one_adapter(redis_url: str, tmp_path: Path) -> None:
    first, second = tmp_path / "output-1.md", tmp_path / "output-2.md"
    first.write_text("Working on it...\n")
    second.write_text(
        "Resumed.\n[COMPLETION_REPORT]\nagent_id: agent-r\nstatus: success\nsummary: done\n[/COMPLETION_REPORT]\n"
    )
    (tmp_path / "sub").mkdir()
    project = {"CLAUDE_PROJECT_DIR": str(tmp_path)}

    def launched(output: Path, cwd: Path = tmp_path, group: str = "s-r") -> bytes:
        response = {"status": "async_launched", "agentId": "agent-r", "outputFile": str(output)}
        call = {"session_id": group, "cwd": str(cwd), "tool_name": "Task", "tool_response": response}
        return json.dumps(call).encode()

    def adapter() -> Proc:
        recorded = tmp_path / ".subagent-bus/hooks/agent-r.watch"
        return Proc.model_validate(json.loads(recorded.read_text())["adapter"])

    async def stopped(proc: Proc) -> bool:
        return not proc.alive()

    done = hook(launched(first), tmp_path, redis_url, env=project)
    assert done.returncode == 0, done.stderr
    following = adapter()
    async with open_bus(redis_url) as bus, contextlib.AsyncExitStack() as cleanup:
        cleanup.callback(lambda: adapter().terminate())  # should the test fail: it never completes

        async def started() -> bool:
            return await bus.has("s-r", EnvelopeType.AGENT_STARTED)

        await wait_until(started, 30, "the adapter to follow the first file")
        # resumed, writing on in the same file, the session gone to another directory meanwhile: the
        # adapter that follows it is left alone (the project directory holds its record)
        again = hook(launched(first, tmp_path / "sub"), tmp_path / "sub", redis_url, env=project)
        assert b"already following agent-r" in again.stdout, again
        assert following.alive()
        assert not (tmp_path / "sub/.subagent-bus").exists()
        # the same file for another group: followed for that group instead
        other = hook(launched(first, group="s-other"), tmp_path, redis_url, env=project)
        assert b"subagent-bus: following agent-r (group s-other)" in other.stdout, other
        await wait_until(functools.partial(stopped, following), 30, "the first adapter to stop")
        following = adapter()
        # resumed with another file: a new adapter follows it, the one before publishes the rest of its
        # file (told so moments after it started: it waits until it can take the signal), then stops
        with first.open("a") as out:
            out.write("[PROGRESS]\nagent_id: agent-r\npercent: 90\nmessage: last words\n[/PROGRESS]\n")
        resumed = hook(launched(second), tmp_path, redis_url, env=project)
        assert b"subagent-bus: following agent-r (group s-r)" in resumed.stdout, resumed
        await wait_until(functools.partial(stopped, following), 30, "the second adapter to stop")
        assert await bus.has("s-other", EnvelopeType.PROGRESS)

        async def exited() -> bool:
            return await bus.has("s-r", EnvelopeType.AGENT_EXITED)

        await wait_until(exited, 30, "the new adapter to publish the completion and the exit")
        assert await bus.has("s-r", EnvelopeType.COMPLETION_REPORT)
        # the stopped adapters said nothing of an exit (the agent was resumed): only the last one did
        assert len(await bus.of_type("s-r", EnvelopeType.AGENT_EXITED)) == 1
        assert not await bus.has("s-other", EnvelopeType.AGENT_EXITED)


async def test_an_adapter_told_to_finish_as_it_starts_finishes(redis_url: str, tmp_path: Path) -> None:
    # the hook starts it with SIGUSR1 blocked: sent before it handles it, the signal waits
    output = tmp_path / "out.md"
    output.write_text("[PROGRESS]\nagent_id: agent-f\npercent: 10\nmessage: early\n[/PROGRESS]\n")
    response = {"status": "async_launched", "agentId": "agent-f", "outputFile": str(output)}
    call = {"session_id": "s-f", "cwd": str(tmp_path), "tool_name": "Task", "tool_response": response}
    done = hook(json.dumps(call).encode(), tmp_path, redis_url)
    assert done.returncode == 0, done.stderr
    recorded = json.loads((tmp_path / ".subagent-bus/hooks/agent-f.watch").read_text())
    adapter = Proc.model_validate(recorded["adapter"])
    adapter.send(signal.SIGUSR1)  # moments after it started: long before it could handle the signal

    async def stopped() -> bool:
        return not adapter.alive()

    await wait_until(stopped, 30, "the adapter to finish")
    async with open_bus(redis_url) as bus:
        types = [e.type for e in await bus.envelopes("s-f")]
    assert types == [EnvelopeType.AGENT_STARTED, EnvelopeType.PROGRESS]


def test_a_record_that_names_another_process_stops_nothing(redis_url: str, tmp_path: Path) -> None:
    hooks = tmp_path / ".subagent-bus/hooks"
    hooks.mkdir(parents=True)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # a record without a start time (or with a pid of a group) is not trusted: nothing is stopped
        wrong_start = {"pid": sleeper.pid, "started": 1}  # its pid, taken by another process since
        for adapter in ({"pid": sleeper.pid}, wrong_start, {"pid": 0}, {"pid": -1}):
            record = {"adapter": adapter, "group_id": "s", "output_file": str(tmp_path / "elsewhere.md")}
            (hooks / "agent-q.watch").write_text(json.dumps(record))
            response = {"status": "async_launched", "agentId": "agent-q", "outputFile": "missing.md"}
            call = {"session_id": "s", "cwd": str(tmp_path), "tool_response": response}
            done = hook(json.dumps(call).encode(), tmp_path, redis_url)
            assert b"subagent-bus: following agent-q" in done.stdout, done
            Proc.model_validate(json.loads((hooks / "agent-q.watch").read_text())["adapter"]).terminate()
            assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


async def test_the_hooks_adapter_waits_for_a_server_down_at_the_launch(
    fresh_redis: RedisProcess, tmp_path: Path
) -> None:
    output = tmp_path / "out.md"
    output.write_text(
        "[COMPLETION_REPORT]\nagent_id: w1\nstatus: success\nsummary: done\n[/COMPLETION_REPORT]\n"
    )
    call = {"session_id": "s-down", "tool_response": {"agentId": "w1", "outputFile": str(output)}}
    fresh_redis.kill()
    done = hook(json.dumps(call).encode(), tmp_path, fresh_redis.url)
    assert done.returncode == 0, done.stderr
    log = tmp_path / ".subagent-bus" / "hooks" / "w1.log"
    await wait_until(logged(log, "retrying in"), 30, "the adapter to wait for the server")
    fresh_redis.start()
    async with open_bus(fresh_redis.url) as bus:
        await wait_until(
            lambda: bus.has("s-down", EnvelopeType.COMPLETION_REPORT), 60, "the completion report"
        )


async def test_the_task_hook_ignores_other_calls_and_reports_bad_input(
    redis_url: str, tmp_path: Path
) -> None:
    foreground = {
        "session_id": "s",
        "tool_name": "Task",
        "tool_response": {"status": "completed", "content": []},
    }
    done = hook(json.dumps(foreground).encode(), tmp_path, redis_url)
    assert (done.returncode, done.stdout) == (0, b"")
    assert not (tmp_path / ".subagent-bus").exists()
    bad = hook(b"not json", tmp_path, redis_url)
    assert bad.returncode == 1
    assert b"not JSON" in bad.stderr
    no_group = {"tool_response": {"agentId": "a", "outputFile": str(tmp_path / "o")}}
    missing = hook(json.dumps(no_group).encode(), tmp_path, redis_url)
    assert missing.returncode == 1
    assert b"--group" in missing.stderr
    # what the adapter would refuse is refused here, where Claude Code shows it
    for response, session, message in (
        ({"agentId": "a\nb", "outputFile": "o"}, "s", b"must not contain control characters"),
        ({"agentId": "a", "outputFile": "o"}, "s\u0007x", b"the task group 's\\x07x' must not contain"),
        ({"agentId": "a", "outputFile": str(tmp_path)}, "s", b"is a directory"),
        ({"agentId": "a", "outputFile": "/dev/null"}, "s", b"is a pipe or a device, not a regular file"),
        ({"agentId": "a", "outputFile": "o\u0000x"}, "s", b"the outputFile holds a NUL byte"),
    ):
        call = {"session_id": session, "tool_response": response}
        refused = hook(json.dumps(call).encode(), tmp_path, redis_url)
        assert refused.returncode == 1, refused
        assert message in refused.stderr
    long = {"session_id": "s", "tool_response": {"agentId": "a\n" + "x" * 1_000_000, "outputFile": "o"}}
    refused = hook(json.dumps(long).encode(), tmp_path, redis_url)
    assert refused.returncode == 1 and len(refused.stderr) < 500, refused.stderr[:500]  # not a megabyte
    assert b"the agentId 'a\\nxxxx" in refused.stderr
    call = {"session_id": "s", "tool_response": {"agentId": "a", "outputFile": "o"}}
    for url in (f"{redis_url}?bogus=1", "http://example.com"):  # from the environment, or the option
        refused = hook(json.dumps(call).encode(), tmp_path, url)
        assert (refused.returncode, b"invalid settings" in refused.stderr) == (1, True), refused
        refused = hook(json.dumps(call).encode(), tmp_path, redis_url, "--redis-url", url)
        assert (refused.returncode, b"invalid settings" in refused.stderr) == (1, True), refused
    assert not (tmp_path / ".subagent-bus").exists()


async def test_the_task_hook_takes_the_url_init_wrote_and_any_output_path(
    redis_url: str, tmp_path: Path
) -> None:
    output = tmp_path / "-output.md"  # not taken for an option
    output.write_text(
        "[COMPLETION_REPORT]\nagent_id: h2\nstatus: success\nsummary: done\n[/COMPLETION_REPORT]\n"
    )
    call = {"session_id": "s2", "tool_response": {"agentId": "h2", "outputFile": output.name}}
    elsewhere = {"SUBAGENT_BUS_REDIS_URL": "redis://127.0.0.1:1/0"}  # the environment names another Redis
    (tmp_path / "a-file").touch()
    gone = {"CLAUDE_PROJECT_DIR": str(tmp_path / "a-file")}  # no directory: the call's is used
    done = hook(
        json.dumps(call).encode(),
        tmp_path,
        elsewhere["SUBAGENT_BUS_REDIS_URL"],
        "--redis-url",
        redis_url,
        env=gone,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / ".subagent-bus/hooks/h2.log").exists()
    async with open_bus(redis_url) as bus:

        async def completed() -> bool:
            return await bus.has("s2", EnvelopeType.COMPLETION_REPORT)

        await wait_until(completed, 30, "the adapter to publish to the URL of --redis-url")
