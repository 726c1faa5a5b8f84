"""The views and the human commands read a namespace; they never create one (a mistyped --namespace
would otherwise fix a shard count before the coordinator that was meant to choose it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson

from bus.embedded import RedisProcess

CLI = str(Path(sys.executable).parent / "subagent-bus")


def run(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *args, "--redis-url", url, "--namespace", "typo"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_views_of_a_namespace_that_does_not_exist_are_empty_and_create_nothing(
    redis_server: RedisProcess, redis_url: str
) -> None:
    status = run(redis_url, "status")
    missing = "it does not exist on this server (yet); check --namespace\n"
    assert (status.returncode, status.stdout) == (0, f"no groups yet in namespace 'typo': {missing}")
    status_json = run(redis_url, "status", "--json")
    assert orjson.loads(status_json.stdout) == []
    assert "note: namespace 'typo' does not exist on this server (yet): nothing to show" in status_json.stderr
    assert "note:" not in status.stderr  # its own text says it
    for view in (["inbox"], ["findings"], ["findings", "--merged"], ["replay", "--group", "g"]):
        done = run(redis_url, *view)
        assert done.returncode == 0 and "note: namespace 'typo' does not exist" in done.stderr, view
    assert run(redis_url, "inbox").stdout == "nothing waits for a human\n"
    assert run(redis_url, "findings").stdout == "0 findings\n"
    assert run(redis_url, "findings", "--merged", "--json").stdout.strip() == "[]"
    assert run(redis_url, "replay", "--group", "g").stdout == "0 merged findings recomputed for group 'g'\n"
    odd = "a\x1b]0;title\x07b"  # a typed id is shown escaped, as one from the bus is
    assert run(redis_url, "status", "--group", odd).stdout.startswith(
        "no groups yet named 'a\\x1b]0;title\\x07b' "
    )
    assert "for group 'a\\x1b]0;title\\x07b'\n" in run(redis_url, "replay", "--group", odd).stdout
    client = redis_server.client()
    try:
        assert client.keys("*") == []
    finally:
        client.close()


def test_human_commands_name_the_missing_namespace(redis_server: RedisProcess, redis_url: str) -> None:
    for args in (
        ["answer", "agent-1", "Q1=yes"],
        ["resolve", "agent-1", "--resolution", "x"],
        ["approve", "r"],
    ):
        done = run(redis_url, *args)
        assert done.returncode == 1, done.stderr
        assert "namespace 'typo' does not exist on this server" in done.stderr
    client = redis_server.client()
    try:
        assert client.keys("*") == []
    finally:
        client.close()


def test_an_empty_status_says_when_signals_wait_for_a_coordinator(redis_url: str) -> None:
    added = run(redis_url, "findings", "add", '{"title": "t"}', "--agent-id", "a", "--group", "g")
    assert added.returncode == 0, added.stderr
    waiting = run(redis_url, "status")
    assert waiting.stdout == (
        "no groups yet in namespace 'typo' (1 signal(s) wait for a coordinator: start one, "
        "`subagent-bus coordinator`)\n"
    )
    hint = "(1 signal(s) wait for a coordinator: start one, `subagent-bus coordinator`)"
    assert (
        run(redis_url, "status", "--group", "g").stdout
        == f"no groups yet named 'g' in namespace 'typo' {hint}\n"
    )
    assert run(redis_url, "inbox").stdout == f"nothing waits for a human {hint}\n"
    as_json = run(redis_url, "inbox", "--json")
    assert orjson.loads(as_json.stdout)["questions"] == [] and as_json.stderr == f"{hint}\n"
    answer = run(redis_url, "answer", "b", "Q1=yes")
    assert (
        answer.returncode == 1
        and f"no agent 'b' is known to the coordinators (known: a) {hint}" in answer.stderr
    )
    answer = run(redis_url, "answer", "a", "Q1=yes")  # known from the queue
    assert answer.returncode == 1 and "agent 'a' has no open questions" in answer.stderr
    assert run(redis_url, "coordinator", "--burst").returncode == 0
    assert run(redis_url, "status").stdout.startswith("group g: ")
    assert run(redis_url, "inbox").stdout == "nothing waits for a human\n"
    asked = run(redis_url, "findings", "add", '{"title": "u"}', "--agent-id", "a", "--group", "g")
    assert asked.returncode == 0, asked.stderr
    stopped = (
        "(1 signal(s) not applied yet: no coordinator is running; start one, `subagent-bus coordinator`)"
    )
    assert run(redis_url, "inbox").stdout == f"nothing waits for a human {stopped}\n"
    assert run(redis_url, "status").stdout.endswith(f"\n{stopped}\n")
    assert run(redis_url, "coordinator", "--burst").returncode == 0
    assert run(redis_url, "inbox").stdout == "nothing waits for a human\n"
    assert stopped not in run(redis_url, "status").stdout
    typo = run(redis_url, "status", "--group", "h").stdout
    assert typo == "no groups yet named 'h' in namespace 'typo'; known groups: g\n"


def test_status_refuses_watch_with_json_before_starting_a_local_server(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SUBAGENT_BUS_REDIS_URL"}
    for options in (["--watch", "--json"], ["--json", "--watch", "2"]):
        done = subprocess.run([CLI, "status", *options], check=False, capture_output=True, text=True,
                              timeout=60, cwd=tmp_path, env=env)  # fmt: skip
        assert done.returncode == 2 and "--watch and --json do not go together" in done.stderr, options
        assert "using local Redis" not in done.stderr
    assert not (tmp_path / ".subagent-bus").exists()


def test_a_blank_group_is_refused_before_starting_a_local_server(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SUBAGENT_BUS_REDIS_URL"}
    for command in (["status"], ["findings"], ["replay"], ["answer", "a1", "Q1=yes"], ["resolve", "a1"]):
        done = subprocess.run([CLI, *command, "--group", " "], check=False, capture_output=True, text=True,
                              timeout=60, cwd=tmp_path, env=env)  # fmt: skip
        assert done.returncode == 2 and "'--group': must not be blank" in done.stderr, (command, done.stderr)
    assert not (tmp_path / ".subagent-bus").exists()


def test_status_json_says_on_stderr_what_the_text_says_besides_the_groups(redis_url: str) -> None:
    added = run(redis_url, "findings", "add", '{"title": "t"}', "--agent-id", "a", "--group", "g")
    assert added.returncode == 0, added.stderr
    assert run(redis_url, "coordinator", "--burst").returncode == 0
    typo = run(redis_url, "status", "--group", "h", "--json")
    assert (typo.returncode, typo.stdout) == (0, "[]\n")
    assert typo.stderr == "no groups yet named 'h' in namespace 'typo'; known groups: g\n"
    added = run(redis_url, "findings", "add", '{"title": "u"}', "--agent-id", "a", "--group", "g")
    assert added.returncode == 0, added.stderr
    stale = run(redis_url, "status", "--json")
    assert [s["group_id"] for s in orjson.loads(stale.stdout)] == ["g"]
    assert "(1 signal(s) not applied yet: no coordinator is running;" in stale.stderr
