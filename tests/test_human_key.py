"""Signed human commands (``--human-key-file``): a coordinator given the key applies only the human commands
signed with it, so an agent holding its adapter's credentials cannot answer for a person."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from rules_kit import T0, Feed, stream_id

from bus.directives import AnswerItem, HumanAnswer
from bus.envelope import encode, new_envelope
from bus.errors import ConfigError
from bus.events import AgentStarted, AgentState
from bus.human_key import SIGNATURE_FIELD, read_key, signature, signature_problem
from bus.keys import Keys, StreamKind
from bus.signals import ClarificationNeeded, Question
from coordinator.batch import Batch, Fields, target_streams
from coordinator.commit import Commit
from coordinator.policy import Policy
from coordinator.state import GroupState

CLI = str(Path(sys.executable).parent / "subagent-bus")
KEY = b"k" * 32
KEYS = Keys("signed", 1)
GROUP = "g-signed"


@pytest.fixture(autouse=True)
def _scratch_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a command that missed the URL would start a server in the current dir


def test_a_key_file_holds_at_least_16_bytes_and_its_line_break_is_not_the_key(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_bytes(b"0123456789abcdef\n")
    assert read_key(path) == b"0123456789abcdef"
    path.write_bytes(b"0123456789abcde\n")
    with pytest.raises(ConfigError, match="holds a key of 15 bytes, fewer than 16"):
        read_key(path)
    path.write_bytes(b"x" * 5000)
    with pytest.raises(ConfigError, match="over 4096 bytes"):
        read_key(path)
    with pytest.raises(ConfigError, match=r"cannot read .*missing: No such file or directory"):
        read_key(tmp_path / "missing")
    for not_a_file in (Path("/dev/zero"), tmp_path):  # read without end; no key
        with pytest.raises(ConfigError, match="is neither a file nor a pipe: not a key file"):
            read_key(not_a_file)
    os.mkfifo(tmp_path / "fifo")  # with no writer: opened, it was waited on for ever
    with pytest.raises(ConfigError, match="holds a key of 0 bytes"):
        read_key(tmp_path / "fifo")


def test_a_key_from_a_pipe_is_read_to_its_end_and_a_writer_that_never_finishes_is_not_waited_for() -> None:
    """``--human-key-file <(pass show bus-key)``: the key never on a disk."""
    read, write = os.pipe()
    try:
        os.write(write, b"0123456789abcdef")
        os.write(write, b"ghij\n")
        os.close(write)
        write = -1
        assert read_key(Path(f"/dev/fd/{read}")) == b"0123456789abcdefghij"
    finally:
        os.close(read)
        if write != -1:
            os.close(write)
    read, write = os.pipe()
    try:
        os.write(write, b"0123456789abcdef")  # and never closed
        with pytest.raises(ConfigError, match="a pipe whose writer did not finish within 5s"):
            read_key(Path(f"/dev/fd/{read}"))
    finally:
        os.close(read)
        os.close(write)


def test_only_the_signature_of_the_exact_data_under_the_key_passes() -> None:
    data = b'{"id":"x"}'
    right = signature(KEY, data)
    assert signature_problem(KEY, data, [(SIGNATURE_FIELD, right)]) is None
    assert "not signed" in str(signature_problem(KEY, data, []))
    for fields in (
        [(SIGNATURE_FIELD, signature(b"o" * 32, data))],  # another key
        [(SIGNATURE_FIELD, signature(KEY, data + b" "))],  # other data
        [(SIGNATURE_FIELD, right), (SIGNATURE_FIELD, right)],  # given twice: which one is meant?
    ):
        assert "does not match" in str(signature_problem(KEY, data, fields))


def _waiting() -> dict[str, GroupState]:
    """A group whose agent waits for the answer to Q1."""
    feed = Feed(Policy(), group=GROUP)
    feed.send(AgentStarted(), "a1", at=0)
    question = Question(question_id="Q1", text="OAuth2 or JWT?")
    feed.send(
        ClarificationNeeded(
            agent_id="a1", timestamp=T0, blocked_at="src/auth", reason="two found", questions=[question]
        ),
        "a1",
        at=1,
    )
    return {GROUP: feed.state}


def _answer() -> bytes:
    payload = HumanAnswer(answers=[AnswerItem(question_id="Q1", question="OAuth2 or JWT?", answer="JWT")])
    return encode(new_envelope(payload, agent_id="a1", group_id=GROUP, id="answer-1", ts=T0))


@pytest.mark.parametrize(
    ("fields", "applied"),
    [
        (None, False),  # as an agent would append it
        ((SIGNATURE_FIELD, signature(b"o" * 32, _answer())), False),
        ((SIGNATURE_FIELD, signature(KEY, _answer())), True),
    ],
    ids=["unsigned", "other-key", "signed"],
)
def test_a_coordinator_with_the_key_applies_only_signed_human_commands(
    fields: tuple[bytes, bytes] | None, applied: bool
) -> None:
    stored = _waiting()
    commit = Commit("lease", KEYS.stream(0, StreamKind.SIGNALS), "version")
    targets = target_streams(KEYS, 0)
    batch = Batch(0, KEYS, Policy(), targets, KEYS.stream(0, StreamKind.DEAD), commit, stored, human_key=KEY)
    data = _answer()
    batch.add(stream_id(T0), Fields((b"data", data, *fields)) if fields else data, 1, 5)
    state = batch.groups.get(GROUP, stored[GROUP])
    assert (state.agents["a1"].state is AgentState.RUNNING) is applied
    assert bool(batch.dead) is not applied
    unkeyed = Batch(0, KEYS, Policy(), targets, KEYS.stream(0, StreamKind.DEAD), commit, _waiting())
    unkeyed.add(stream_id(T0), Fields((b"data", data, *fields)) if fields else data, 1, 5)
    assert unkeyed.dead == []  # without a key, every human command is applied, signed or not


def _cli(
    url: str, *args: str, key: Path | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SUBAGENT_BUS_REDIS_URL": url}
    env.pop("SUBAGENT_BUS_HUMAN_KEY_FILE", None)
    if key is not None:
        env["SUBAGENT_BUS_HUMAN_KEY_FILE"] = str(key)
    return subprocess.run(
        [CLI, *args], env=env, input=stdin, check=False, capture_output=True, text=True, timeout=120
    )


def _ok(url: str, *args: str, key: Path | None = None, stdin: str | None = None) -> str:
    done = _cli(url, *args, key=key, stdin=stdin)
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done.stdout


def _state(url: str) -> str:
    [group] = orjson.loads(_ok(url, "status", "--group", GROUP, "--json"))
    [agent] = group["agents"]
    return str(agent["state"])


CLARIFY = """[CLARIFICATION_NEEDED]
agent_id: a1
timestamp: 2026-01-11T08:45:00-05:00
blocked_at: src/auth
reason: Two strategies found
questions:
  - question_id: Q1
    text: OAuth2 or JWT?
can_resume_with: an answer
current_state: secrets scanned
[/CLARIFICATION_NEEDED]
"""


def test_through_the_cli_an_agent_s_forged_answer_is_dead_lettered_and_a_person_s_applied(
    redis_url: str, tmp_path: Path
) -> None:
    key = tmp_path / "human.key"
    key.write_text("a-key-of-more-than-sixteen-bytes\n")
    _ok(redis_url, "adapter", "stdin", "--agent-id=a1", "--group", GROUP, stdin=CLARIFY)
    _ok(redis_url, "coordinator", "--burst", "--lease-ttl", "1000", key=key)
    _ok(redis_url, "answer", "a1", "Q1=JWT", "--wait", "0")  # what an agent with its adapter's URL can do
    _ok(redis_url, "coordinator", "--burst", "--lease-ttl", "1000", key=key)
    assert _state(redis_url) == AgentState.AWAITING_CLARIFICATION.value
    dead = _ok(redis_url, "tail", "--stream", "dead", "--from", "0", "--timeout", "0.5", "--json")
    [letter] = [orjson.loads(line) for line in dead.splitlines()]
    assert letter["reason"].startswith("human command not signed"), letter

    _ok(redis_url, "answer", "a1", "Q1=JWT", "--wait", "0", key=key)
    _ok(redis_url, "coordinator", "--burst", "--lease-ttl", "1000", key=key)
    assert _state(redis_url) == AgentState.RUNNING.value
    client = redis.Redis.from_url(redis_url)
    try:
        rows: Any = client.xrange(Keys("sbus", 8).stream(Keys("sbus", 8).shard_of(GROUP), StreamKind.SIGNALS))
    finally:
        client.close()
    signed = [fields for _, fields in rows if SIGNATURE_FIELD in fields]
    assert len(signed) == 1


def test_a_key_file_that_is_too_short_is_a_usage_error(redis_url: str, tmp_path: Path) -> None:
    key = tmp_path / "human.key"
    key.write_text("short\n")
    for args in (["coordinator", "--burst"], ["answer", "a1", "Q1=JWT"]):
        done = _cli(redis_url, *args, key=key)
        assert done.returncode == 2, done.stderr
        assert "Invalid value for '--human-key-file'" in done.stderr
        assert "holds a key of 5 bytes, fewer than 16" in done.stderr


def test_with_the_key_a_forged_queued_command_neither_shows_as_queued_nor_blocks_a_person_s(
    redis_url: str, tmp_path: Path
) -> None:
    """No coordinator runs: an agent's forged answer waits on the stream. ``inbox`` with the key leaves
    it out, and a person's answer is checked as if it were not there (the coordinators will dead-letter
    it), rather than refused as an answer to a question the forged one answered."""
    key = tmp_path / "human.key"
    key.write_text("a-key-of-more-than-sixteen-bytes\n")
    _ok(redis_url, "adapter", "stdin", "--agent-id=a1", "--group", GROUP, stdin=CLARIFY)
    _ok(redis_url, "coordinator", "--burst", "--lease-ttl", "1000", key=key)
    _ok(redis_url, "answer", "a1", "Q1=OAuth2", "--wait", "0")  # forged: no key

    def queued(key: Path | None) -> list[str]:
        listed = orjson.loads(_ok(redis_url, "inbox", "--json", key=key))
        assert [q["question_id"] for q in listed["questions"]] == ["Q1"]
        return [q["command"] for q in listed["queued"]]

    assert queued(None) == ["ANSWER"]  # without the key, any command counts
    assert queued(key) == []
    _ok(redis_url, "answer", "a1", "Q1=JWT", "--wait", "0", key=key)
    assert queued(key) == ["ANSWER"]
    _ok(redis_url, "coordinator", "--burst", "--lease-ttl", "1000", key=key)
    assert _state(redis_url) == AgentState.RUNNING.value
    resume = orjson.loads(
        _ok(redis_url, "listen", "--agent-id=a1", "--group", GROUP, "--json", "--timeout=0")
    )
    assert [a["answer"] for a in resume["payload"]["answers"]] == ["JWT"]


@pytest.mark.parametrize(
    "command", [["coordinator", "--lease-ttl", "600000"], ["up"]], ids=["coordinator", "up"]
)
def test_a_command_a_running_coordinator_dead_letters_says_so_and_exits_1(
    redis_url: str, tmp_path: Path, command: list[str]
) -> None:
    """Not "queued ... (no decision within 10s)": the coordinator dead-lettered it at once, and it will
    never be applied. `up`'s coordinator too: it took no key, and applied the agent's forgery."""
    key = tmp_path / "human.key"
    key.write_text("a-key-of-more-than-sixteen-bytes\n")
    _ok(redis_url, "adapter", "stdin", "--agent-id=a1", "--group", GROUP, stdin=CLARIFY)
    env = {**os.environ, "SUBAGENT_BUS_REDIS_URL": redis_url, "SUBAGENT_BUS_HUMAN_KEY_FILE": str(key)}
    coordinator = subprocess.Popen([CLI, *command], env=env, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60  # each look is a process's start: no pause needed between
        while not orjson.loads(_ok(redis_url, "inbox", "--json"))["questions"]:
            assert coordinator.poll() is None and time.monotonic() < deadline, "no question opened"
        done = _cli(redis_url, "answer", "a1", "Q1=JWT", "--wait", "120")  # no key: an agent's forgery
        assert done.returncode == 1, done.stdout
        assert "was dead-lettered by the coordinator: human command not signed" in done.stderr, done.stderr
    finally:
        coordinator.kill()
        coordinator.wait()


def test_a_coordinator_without_the_key_does_not_start_beside_one_with_it(
    redis_url: str, tmp_path: Path
) -> None:
    """It would apply an agent's forged commands on the shards it took; nor does ``up`` say it is up."""
    key = tmp_path / "human.key"
    key.write_text("a-key-of-more-than-sixteen-bytes\n")
    env = {**os.environ, "SUBAGENT_BUS_REDIS_URL": redis_url, "SUBAGENT_BUS_HUMAN_KEY_FILE": str(key)}
    keyed = subprocess.Popen([CLI, "coordinator", "--name", "keyed"], env=env, stderr=subprocess.DEVNULL)
    client = redis.Redis.from_url(redis_url)
    try:
        deadline = time.monotonic() + 60
        while not client.zcard("sbus:coordinators"):
            assert keyed.poll() is None and time.monotonic() < deadline, "the keyed coordinator never joined"
        for command in (["coordinator", "--burst"], ["coordinator"], ["up"]):
            done = _cli(redis_url, *command)
            assert done.returncode == 1, (command, done.stdout, done.stderr)
            assert "the live coordinator 'keyed:" in done.stderr, done.stderr
            assert "runs with a human key, this one with no human key" in done.stderr, done.stderr
            assert "is up" not in done.stdout + done.stderr
        assert client.zcard("sbus:coordinators") == 1  # none of them stayed a member
        _ok(redis_url, "coordinator", "--burst", key=key)  # with the key, it runs
    finally:
        client.close()
        keyed.kill()
        keyed.wait()
