"""The human side through the real CLI: agents publish protocol text through `adapter stdin`, a
`coordinator --burst` applies it, and the human commands and views act on what it committed."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from click.testing import CliRunner

from bus.connection import connect
from bus.directives import HumanApprove
from bus.envelope import encode, new_envelope
from bus.errors import ConfigError, ConnectionFailed
from bus.events import Decision, DecisionType, Heartbeat
from bus.findings import Finding
from bus.keys import Keys, StreamKind, open_namespace
from bus.publisher import Publisher
from bus.settings import DEFAULT_NAMESPACE, Settings
from bus.signals import ClarificationNeeded, DelegateWork, Question
from coordinator import human, human_publish, views_cli
from coordinator.human_publish import _decision
from coordinator.lease import lease_key
from coordinator.policy import Policy
from coordinator.view import load_summaries

CLI = str(Path(sys.executable).parent / "subagent-bus")


@pytest.fixture(autouse=True)
def _scratch_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a command that missed the URL would start a server in the current dir


def cli(url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The command with the server's URL in the environment (arguments after `--` stay positional)."""
    return subprocess.run(
        [CLI, *args],
        env={**os.environ, "SUBAGENT_BUS_REDIS_URL": url},
        input=stdin,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


def ok(url: str, *args: str, stdin: str | None = None) -> str:
    done = cli(url, *args, stdin=stdin)
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done.stdout


def agent_says(url: str, agent_id: str, group: str, text: str) -> None:
    ok(url, "adapter", "stdin", f"--agent-id={agent_id}", "--group", group, stdin=text)


def coordinate(url: str) -> None:
    ok(url, "coordinator", "--burst", "--lease-ttl", "1000")


def signals(url: str) -> list[dict[str, Any]]:
    out = ok(url, "tail", "--stream", "signals", "--from", "0", "--timeout", "0.5", "--json")
    return [orjson.loads(line) for line in out.splitlines()]


def said(url: str) -> list[dict[str, Any]]:
    """The signals stream without the coordinators' own ticks (one lands there every few seconds)."""
    return [entry for entry in signals(url) if entry["source"] != "tick"]


def directives(url: str, agent_id: str) -> list[dict[str, Any]]:
    out = ok(url, "tail", "--stream", f"inbox:{agent_id}", "--from", "0", "--timeout", "0.5", "--json")
    return [orjson.loads(line) for line in out.splitlines()]


def clarify(agent_id: str, at: str = "2026-01-11T08:45:00-05:00") -> str:
    return f"""[CLARIFICATION_NEEDED]
agent_id: {agent_id}
timestamp: {at}
blocked_at: src/auth
reason: Two strategies found
questions:
  - question_id: Q1
    text: OAuth2 or JWT?
    context: both exist
can_resume_with: an answer
current_state: secrets scanned
[/CLARIFICATION_NEEDED]
"""


def stop(agent_id: str, reason: str = "blocker", kind: str = "external_dependency") -> str:
    return f"""[STOP_WORK]
agent_id: {agent_id}
timestamp: 2026-01-11T09:15:00-05:00
stop_reason: {reason}
blocker_type: {kind}
details: node_modules is missing
completed_work: the secrets scan
blocked_work: the dependency scan
state_snapshot: 47/120 files
resume_requirements: npm install
[/STOP_WORK]
"""


DELEGATE = """[DELEGATE_WORK]
agent_id: lead
timestamp: 2026-01-11T10:00:00-05:00
delegation_reason: The API documentation is a separate, large job
new_task_description: Document every deprecated endpoint in the public API and propose removal dates
independence: optional
priority: P2
context_required: src/api
coordination: none
estimated_duration: 1h
[/DELEGATE_WORK]
"""


def _suggested(url: str, verb: str) -> list[list[str]]:
    """The commands of that verb that `inbox` suggests, split as bash splits them."""
    lines = [line.strip() for line in ok(url, "inbox").splitlines()]
    found = []
    for line in lines:
        for part in line.split("  |  "):
            command = part.split(": ", 1)[-1].strip()
            if command.startswith(f"subagent-bus {verb} "):
                words = subprocess.run(
                    ["bash", "-c", f'set -- {command}; printf "%s\\0" "$@"'], capture_output=True, check=True
                )
                found.append(words.stdout.decode().split("\0")[:-1])
    return found


def test_an_agent_id_known_in_two_groups_is_acted_on_in_the_right_one(redis_url: str) -> None:
    agent_says(redis_url, "worker", "alpha", stop("worker"))
    agent_says(redis_url, "worker", "beta", clarify("worker"))
    coordinate(redis_url)

    [answer] = _suggested(redis_url, "answer")
    assert answer[:5] == ["subagent-bus", "answer", "worker", "Q1=...", "--group"] and answer[5] == "beta"
    [resolve] = _suggested(redis_url, "resolve")
    assert resolve[-2:] == ["--group", "alpha"]
    questions = orjson.loads(ok(redis_url, "inbox", "--json"))["questions"]
    assert [(q["group_id"], q["agent_id"]) for q in questions] == [("beta", "worker")]

    # without --group, the one group where the command applies is chosen
    ok(redis_url, "answer", "worker", "Q1=JWT only")
    ok(redis_url, "resolve", "worker", "--resolution", "Ran npm install")
    coordinate(redis_url)
    by_group = {d["group_id"]: d for d in directives(redis_url, "worker")}
    assert by_group["beta"]["type"] == "CLARIFICATION_RESPONSE"
    assert by_group["alpha"]["type"] == "BLOCKER_RESOLVED"

    asked_again = "2026-01-11T10:45:00-05:00"  # (the same dated block again is a recap: not applied)
    agent_says(redis_url, "worker", "alpha", clarify("worker", asked_again))
    agent_says(redis_url, "worker", "beta", clarify("worker", asked_again))
    coordinate(redis_url)
    both = cli(redis_url, "answer", "worker", "Q1=x")
    assert both.returncode == 1
    assert "agent 'worker' is known in groups 'alpha', 'beta': choose one with --group" in both.stderr
    nowhere = cli(redis_url, "resolve", "worker", "--resolution", "x")
    assert nowhere.returncode == 1
    assert "in group 'alpha': agent 'worker' has no open blocker" in nowhere.stderr
    missing = cli(redis_url, "answer", "worker", "Q1=x", "--group", "gamma")
    assert missing.returncode == 1 and "no group 'gamma' is known to the coordinators" in missing.stderr
    published = len(said(redis_url))
    for command in _suggested(redis_url, "answer"):
        ok(redis_url, *command[1:])
    assert len(said(redis_url)) == published + 2


def test_a_delegation_request_id_known_in_two_groups_needs_its_group(redis_url: str) -> None:
    # the id derives from the signal's fields: the same signal in two groups shares it
    agent_says(redis_url, "lead", "alpha", DELEGATE)
    agent_says(redis_url, "lead", "beta", DELEGATE)
    coordinate(redis_url)
    delegations = orjson.loads(ok(redis_url, "inbox", "--json"))["delegations"]
    assert [d["group_id"] for d in delegations] == ["alpha", "beta"]
    request = delegations[0]["request_id"]
    assert delegations[1]["request_id"] == request
    both = cli(redis_url, "approve", request)
    assert both.returncode == 1 and "choose one with --group" in both.stderr
    approves = _suggested(redis_url, "approve")
    assert [c[-2:] for c in approves] == [["--group", "alpha"], ["--group", "beta"]]
    ok(redis_url, *approves[1][1:], "--instructions", "Avoid src/auth/ meanwhile")
    coordinate(redis_url)
    [approved] = directives(redis_url, "lead")
    assert approved["group_id"] == "beta"
    assert approved["payload"]["resume_instructions"] == "Avoid src/auth/ meanwhile"
    [left] = orjson.loads(ok(redis_url, "inbox", "--json"))["delegations"]
    assert left["group_id"] == "alpha"
    ok(redis_url, "deny", request, "--reason", "not now")  # the only one still pending
    coordinate(redis_url)
    assert orjson.loads(ok(redis_url, "inbox", "--json"))["delegations"] == []


def test_an_id_that_starts_with_a_dash_gets_commands_that_work(redis_url: str) -> None:
    agent_says(redis_url, "-x", "g", clarify("-x"))
    agent_says(redis_url, "-y", "g", stop("-y", "error", "error"))
    coordinate(redis_url)
    [answer] = _suggested(redis_url, "answer")
    assert answer == ["subagent-bus", "answer", "--", "-x", "Q1=..."]
    ok(redis_url, *answer[1:])
    [recover] = [line for line in ok(redis_url, "inbox").splitlines() if "subagent-bus recover" in line]
    assert recover.endswith(
        "--option retry_from_checkpoint -- -y  # or --option skip_and_continue / delegate"
    )
    ok(redis_url, "recover", "--option", "skip_and_continue", "--", "-y")
    coordinate(redis_url)
    assert [d["type"] for d in directives(redis_url, "-x")] == ["CLARIFICATION_RESPONSE"]
    assert [d["type"] for d in directives(redis_url, "-y")] == ["ERROR_RECOVERY"]


def test_a_blank_text_is_a_usage_error_and_publishes_nothing(redis_url: str) -> None:
    agent_says(redis_url, "worker", "g", stop("worker"))
    agent_says(redis_url, "failing", "g", stop("failing", "error", "error"))
    agent_says(redis_url, "asker", "g", clarify("asker"))
    agent_says(redis_url, "lead", "g", DELEGATE)
    coordinate(redis_url)
    [request] = [d["request_id"] for d in orjson.loads(ok(redis_url, "inbox", "--json"))["delegations"]]
    published = len(said(redis_url))
    for args, option in [
        (["resolve", "worker", "--resolution", ""], "--resolution"),
        (["resolve", "worker", "--resolution", "ok", "--instructions", "  "], "--instructions"),
        (["deny", request, "--reason", ""], "--reason"),
        (["deny", request, "--reason", "no", "--alternative", "\n"], "--alternative"),
        (["approve", request, "--reason", " "], "--reason"),
        (["answer", "asker", "Q1=x", "--next-step", ""], "--next-step"),
        (["recover", "failing", "--option", "delegate", "--instructions", ""], "--instructions"),
        (["approve", ""], "REQUEST_ID"),
        (["deny", " ", "--reason", "no"], "REQUEST_ID"),
        (["answer", "", "Q1=x"], "AGENT_ID"),
        (["resolve", "", "--resolution", "ok"], "AGENT_ID"),
        (["recover", " ", "--option", "skip_and_continue"], "AGENT_ID"),
        (["dismiss", ""], "AGENT_ID"),
    ]:
        done = cli(redis_url, *args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert f"Invalid value for '{option}': must not be blank" in done.stderr
    blank_answer = cli(redis_url, "answer", "asker", "Q1=   ")
    assert blank_answer.returncode == 2 and "the answer to Q1 is blank" in blank_answer.stderr
    for wait in ("nan", "inf", "-1"):
        waited = cli(redis_url, "answer", "asker", "Q1=x", "--wait", wait)
        assert waited.returncode == 2 and "Invalid value for '--wait'" in waited.stderr, (wait, waited.stderr)
    assert len(said(redis_url)) == published


def test_an_id_longer_than_any_is_a_usage_error_said_in_a_line(redis_url: str) -> None:
    """The id of no agent and no group: it was looked for, and the message saying it is unknown repeated
    all of it (100 000 characters, twice from `replay`)."""
    coordinate(redis_url)
    long = "a" * 100_000
    for args, option in [
        (["answer", long, "Q1=x"], "AGENT_ID"),
        (["resolve", long, "--resolution", "ok"], "AGENT_ID"),
        (["dismiss", long], "AGENT_ID"),
        (["answer", "asker", "Q1=x", "--group", long], "--group"),
        (["status", "--group", long], "--group"),
        (["findings", "--merged", "--group", long], "--group"),
        (["replay", "--group", long], "--group"),
        (["tail", "--stream", "inbox:asker", "--group-id", long], "--group-id"),
    ]:
        done = cli(redis_url, *args)
        assert done.returncode == 2, (args[0], done.stdout[:200], done.stderr[:200])
        said = f"Invalid value for '{option}': is 100,000 characters long: no agent or group id has more than 256"
        assert said in done.stderr and len(done.stderr) < 1000, (args[0], done.stderr[:300])
    assert len(ok(redis_url, "status", "--group", "a" * 256)) < 2000  # the longest there may be is looked for


def _finding(title: str, severity: str, confidence: int) -> str:
    fields = {"id": "SEC-001", "title": title, "file": "src/a.ts", "line": 8, "severity": severity}
    return orjson.dumps({**fields, "confidence": confidence}).decode()


def test_entries_of_the_findings_stream_that_are_no_findings_are_skipped_and_said(redis_url: str) -> None:
    ok(redis_url, "findings", "add", "--agent-id", "auditor", "--group", "alpha", _finding("JWT", "critical", 95))  # fmt: skip
    coordinate(redis_url)
    keys = Keys(DEFAULT_NAMESPACE, 8)
    stream = keys.stream(keys.shard_of("alpha"), StreamKind.FINDINGS)
    with redis.Redis.from_url(redis_url) as client:
        foreign = client.xadd(stream, {"data": "not json"}).decode()
        client.xadd(stream, {"other": "field"})
        client.xadd(stream, {"data": encode(new_envelope(Heartbeat(), agent_id="a", group_id="alpha"))})
    for args in (["findings", "--jsonl", "--group", "alpha"], ["replay", "--group", "alpha", "--json"]):
        done = cli(redis_url, *args)
        assert done.returncode == 0, done.stderr
        assert "JWT" in done.stdout
        said = (
            f"skipped 3 entries of the findings stream that are no findings (the first: {stream} {foreign}: "
        )
        assert said in done.stderr, (args, done.stderr)


@pytest.mark.parametrize("senders", [("agent-one", "agent-two"), ("[]", "**")])
def test_replay_takes_a_finding_that_names_no_agent_for_its_sender_s(
    redis_url: str, senders: tuple[str, str]
) -> None:
    # as the rules do: another writer's two reports, of two senders, are two agents in conflict (an id of
    # punctuation alone, blank once normalised, as it is)
    keys = Keys(DEFAULT_NAMESPACE, 8)
    ok(redis_url, "findings", "add", "--agent-id", "seed", "--group", "alpha", _finding("seed", "minor", 50))
    coordinate(redis_url)  # the namespace, and the group
    stream = keys.stream(keys.shard_of("alpha"), StreamKind.FINDINGS)
    with redis.Redis.from_url(redis_url) as client:
        for sender, severity, confidence in zip(senders, ("critical", "high"), (95, 78), strict=True):
            finding = Finding(title="SQLi", file="src/b.ts", line=8, severity=severity, confidence=confidence)
            client.xadd(stream, {"data": encode(new_envelope(finding, agent_id=sender, group_id="alpha"))})
    replayed = orjson.loads(ok(redis_url, "replay", "--group", "alpha", "--json"))
    [sqli] = [m for m in replayed if m["finding"]["title"] == "SQLi"]
    assert (sqli["confidence"], sqli["agents"], sqli["severity_conflict"]) == (
        pytest.approx(96.5),
        sorted(senders),
        True,
    )


def test_replay_of_a_partly_trimmed_findings_stream_says_so(redis_url: str) -> None:
    # the merged view the coordinators keep holds both reports, the recomputed one only the second
    for agent, confidence in (("auditor", 95), ("qa", 78)):
        ok(redis_url, "findings", "add", "--agent-id", agent, "--group", "alpha", _finding("JWT", "critical", confidence))  # fmt: skip
    coordinate(redis_url)
    assert "trimming" not in cli(redis_url, "replay", "--group", "alpha").stderr
    ok(redis_url, "trim", "--findings", "1")
    done = cli(redis_url, "replay", "--group", "alpha")
    assert done.returncode == 0 and "78.0" in done.stdout
    assert done.stderr.strip().splitlines()[-1] == (
        "the findings stream of the shard of group 'alpha' has lost 1 entries to trimming: reports of this "
        "group among them would be missing from this view; `subagent-bus findings --merged --group alpha` "
        "shows the merged view the coordinators keep"
    )


def test_findings_of_different_groups_are_merged_apart(redis_url: str) -> None:
    ok(
        redis_url,
        "findings",
        "add",
        "--agent-id",
        "auditor",
        "--group",
        "alpha",
        _finding("JWT secret", "critical", 95),
    )
    ok(
        redis_url,
        "findings",
        "add",
        "--agent-id",
        "qa",
        "--group",
        "alpha",
        _finding("JWT secret", "critical", 78),
    )
    ok(redis_url, "findings", "add", "--agent-id", "other", "--group", "beta", _finding("JWT\nsecret", "minor", 10))  # fmt: skip
    coordinate(redis_url)
    merged = orjson.loads(ok(redis_url, "findings", "--merged", "--json"))
    assert [(m["group_id"], m["confidence"], m["severity_conflict"]) for m in merged] == [
        ("alpha", pytest.approx(96.5), False),
        ("beta", 10.0, False),
    ]
    counts = {g["group_id"]: g["findings"] for g in orjson.loads(ok(redis_url, "status", "--json"))}
    assert counts == {"alpha": 1, "beta": 1}  # what the coordinator merged, group by group
    lines = ok(redis_url, "findings", "--merged").splitlines()
    assert [line for line in lines if not line.startswith("src/")] == [
        "group alpha:",
        "group beta:",
        "2 merged findings",
    ]
    assert lines[3].split()[-2:] == ["JWT", "secret"]  # one line per finding, whatever the title holds
    raw = ok(redis_url, "findings").splitlines()
    assert raw == [
        "group alpha:",
        "src/a.ts:8 critical JWT secret (auditor)",
        "src/a.ts:8 critical JWT secret (qa)",
        "group beta:",
        "src/a.ts:8 minor JWT secret (other)",
        "3 findings",
    ]
    alpha = orjson.loads(ok(redis_url, "replay", "--group", "alpha", "--json"))
    assert alpha == merged[:1]
    for command in (["findings", "--group", "Alpha"], ["replay", "--group", "Alpha"]):
        done = cli(redis_url, *command)  # a mistyped group is told apart from a quiet one
        assert done.returncode == 0
        assert done.stderr.strip().splitlines()[-1] == (
            "no findings for group 'Alpha' in namespace 'sbus'; known groups: alpha, beta"
        )
    # raw findings stay what `findings add` reads, so that they can be published again (to its --group)
    copied = ok(redis_url, "findings", "--jsonl", "--group", "beta")
    assert [orjson.loads(line)["group_id"] for line in copied.splitlines()] == ["beta"]
    ok(redis_url, "findings", "add", "--agent-id", "copier", "--group", "gamma", stdin=copied)
    # the merged view is the coordinators' own: a trimmed findings stream leaves it as it was
    ok(redis_url, "trim", "--findings", "0")
    assert ok(redis_url, "findings").splitlines() == ["0 findings"]
    assert orjson.loads(ok(redis_url, "findings", "--merged", "--json")) == merged
    for command in (["findings", "--group", "alpha"], ["replay", "--group", "alpha"]):
        trimmed = cli(redis_url, *command)
        assert trimmed.returncode == 0
        assert trimmed.stderr.strip().splitlines()[-1] == (
            "no findings for group 'alpha' in namespace 'sbus': the findings stream holds none of its "
            "reports any more (trimmed); `subagent-bus findings --merged --group alpha` shows the merged view the "
            "coordinators keep"
        )
    agent_says(redis_url, "quiet-1", "quiet", stop("quiet-1"))  # a known group without findings
    coordinate(redis_url)
    quiet = cli(redis_url, "findings", "--merged", "--group", "quiet")
    assert quiet.stderr.strip().splitlines()[-1] == (
        "no findings for group 'quiet' in namespace 'sbus': none of its agents reported one yet"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_parallel_agents = true\n", "max_parallel_agents: Value error, true/false is not a valid value"),
        ("[expertise]\nqa = true\n", "expertise: Value error, true/false is not a valid value"),
        ('max_retries = "3"\n', "max_retries: Value error, a number is expected, not text"),
        ('[expertise]\nqa = "1.5"\n', "expertise: Value error, a number is expected, not text"),
        ("lost_timeout_seconds = inf\n", "lost_timeout_seconds: Input should be a finite number"),
        ("lost_timeout_seconds = 1e15\n", "lost_timeout_seconds: Input should be less than or equal to"),
    ],
)
def test_policy_values_that_would_be_misread_are_refused(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        Policy.load(path)
    assert message in str(caught.value)


def test_a_policy_path_that_is_a_pipe_is_refused_not_waited_on(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    os.mkfifo(path)
    with pytest.raises(ConfigError, match="not a regular file"):
        Policy.load(path)


def test_a_policy_in_yaml_with_yes_for_a_number_is_refused(tmp_path: Path, redis_url: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("max_retries: yes\n", encoding="utf-8")
    done = cli(redis_url, "coordinator", "--burst", "--policy", str(path))
    assert done.returncode == 2
    assert "max_retries: Value error, true/false is not a valid value here" in done.stderr


def test_up_says_it_is_up_only_when_it_can_be(tmp_path: Path, redis_url: str) -> None:
    bad = tmp_path / "policy.toml"
    bad.write_text("max_parallel = 3\n", encoding="utf-8")
    refused = cli(redis_url, "up", "--policy", str(bad))
    assert refused.returncode == 2 and "unknown setting 'max_parallel'" in refused.stderr
    assert "is up" not in refused.stderr
    down = cli("redis://127.0.0.1:1", "up")
    assert down.returncode == 1 and "Redis unavailable" in down.stderr
    assert "is up" not in down.stderr
    assert cli(redis_url, "coordinator", "--burst", "--namespace", "up8").returncode == 0  # 8 shards
    other = cli(redis_url, "up", "--namespace", "up8", "--shards", "4")
    assert other.returncode == 1 and "namespace 'up8' has 8 shards, not 4" in other.stderr
    assert "is up" not in other.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        metrics = cli(redis_url, "up", "--metrics-port", str(taken.getsockname()[1]))
    assert metrics.returncode != 0 and "is up" not in metrics.stderr, metrics.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["coordinator", "--tick", "nan"], "'nan' is not a finite number"),
        (["coordinator", "--tick", "0"], "0.0 is not in the range x>=0.1"),
        (["coordinator", "--batch", "0"], "0 is not in the range 1<=x<=10000"),
        (["coordinator", "--lease-ttl", "10"], "10 is not in the range 1000<=x<=86400000"),
        (["status", "--watch", "inf"], "inf is not in the range 0.1<=x<=86400"),
    ],
)
def test_numbers_no_coordinator_or_view_can_use_are_usage_errors(args: list[str], message: str) -> None:
    done = cli("redis://127.0.0.1:1", *args)  # refused before any connection is tried
    assert done.returncode == 2, done.stderr
    assert message in done.stderr


def test_an_escalation_leaves_the_inbox_once_dismissed(tmp_path: Path, redis_url: str) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("max_retries = 0\n", encoding="utf-8")
    failed = """[COMPLETION_REPORT]
agent_id: w1
timestamp: 2026-01-11T12:00:00-05:00
status: failed
summary: The scanner crashed on every file
[/COMPLETION_REPORT]
"""
    agent_says(redis_url, "w1", "g1", failed)
    ok(redis_url, "coordinator", "--burst", "--lease-ttl", "1000", "--policy", str(policy))
    assert "escalated w1: w1 failed after 1 attempt(s)" in ok(redis_url, "inbox")
    [command] = _suggested(redis_url, "dismiss")
    assert command == ["subagent-bus", "dismiss", "w1"]
    ok(redis_url, *command[1:], "--note", "rerun by hand")
    coordinate(redis_url)
    assert ok(redis_url, "inbox").strip() == "nothing waits for a human"
    status = orjson.loads(ok(redis_url, "status", "--json"))
    assert status[0]["escalations"] == [] and status[0]["status"] == "escalate"
    again = cli(redis_url, "dismiss", "w1")
    assert again.returncode == 1 and "agent 'w1' has no open escalation" in again.stderr


def test_with_a_coordinator_running_a_command_says_what_became_of_it(redis_url: str) -> None:
    def ask(question: str) -> None:
        agent_says(redis_url, "asker", "g-said", clarify("asker").replace("Q1", question))

    ask("Q1")
    coordinate(redis_url)
    queued = ok(redis_url, "answer", "asker", "Q1=JWT")
    assert "(no coordinator runs now); a coordinator applies it in order" in queued, queued
    env = {**os.environ, "SUBAGENT_BUS_REDIS_URL": redis_url}
    # A lease that outlives the pause below: the approval must find the coordinator holding the shard.
    Path("policy.toml").write_text('auto_approve = ["P0", "P1", "P2"]\nhuman_approval = []\n')
    command = [CLI, "coordinator", "--lease-ttl", "600000", "--policy", "policy.toml"]
    coordinator = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
    try:
        ask("Q2")
        until(lambda: "Q2" in ok(redis_url, "inbox"), "the coordinator to open the question")
        applied = ok(redis_url, "answer", "asker", "Q2=JWT", "--wait", "120")  # a loaded machine's CI
        assert applied.startswith("answer applied as ") and ": question_answered: " in applied, applied
        agent_says(redis_url, "stopper", "g-said", stop("stopper"))
        until(lambda: "stopper" in ok(redis_url, "inbox"), "the coordinator to record the blocker")
        resolved = ok(
            redis_url, "resolve", "stopper", "--resolution", "Set the key.\nRotate it.", "--wait", "120"
        )
        assert ": blocker_resolved: resolved: Set the key.\\nRotate it." in resolved, resolved  # all of it
        ask("Q3")
        until(lambda: "Q3" in ok(redis_url, "inbox"), "the coordinator to open the next question")
        not_waiting = ok(redis_url, "answer", "asker", "Q3=maybe", "--wait", "0")
        assert "(its decision not waited for); a coordinator applies it in order" in not_waiting, not_waiting
        # A command that passes the command's own check but not the coordinator's: given no --policy, the
        # command checks it against the default policy, under which a P2 delegation queued before it
        # waits for a human, while this coordinator's policy approves it at once. It says so (exit 1).
        coordinator.send_signal(signal.SIGSTOP)
        agent_says(redis_url, "lead", "g-said", DELEGATE)
        [delegate] = [e for e in said(redis_url) if e["type"] == "DELEGATE_WORK"]
        request = DelegateWork.model_validate(delegate["payload"]).request_id()
        command = [CLI, "approve", request, "--wait", "120"]
        approve = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        until(lambda: any(e["type"] == "APPROVE" for e in said(redis_url)), "the approval to be published")
        coordinator.send_signal(signal.SIGCONT)
        code, _, err = finished(approve)
        assert code == 1 and f"delegation request '{request}' is already approved" in err, err
        assert "was rejected by the coordinator: " in err, err
    finally:
        coordinator.kill()
        coordinator.wait()


def finished(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=60)
    return process.returncode, out, err


def until(condition: Callable[[], bool], what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")


def test_a_question_id_that_holds_an_equals_sign_is_answered_as_inbox_suggests(redis_url: str) -> None:
    ids = ["a=b", "a", "=x", " sp "]  # with "=", a prefix of another, starting with "=", in spaces
    listed = "".join(f'  - question_id: "{qid}"\n    text: What of {qid}?\n' for qid in ids)
    asked = clarify("eq").replace(
        "  - question_id: Q1\n    text: OAuth2 or JWT?\n    context: both exist\n", listed
    )
    agent_says(redis_url, "eq", "g", asked)
    coordinate(redis_url)
    inbox = ok(redis_url, "inbox")
    for suggested in ['answer eq a=b="..."', 'answer eq =x="..."', "answer eq ' sp '=\"...\""]:
        assert suggested in inbox, inbox
    ok(redis_url, "answer", "eq", "a=b=x=1", "a=y", "=x==", " sp =z", "--wait", "0")
    coordinate(redis_url)
    [directive] = directives(redis_url, "eq")
    answers = {a["question_id"]: a["answer"] for a in directive["payload"]["answers"]}
    assert answers == {"a=b": "x=1", "a": "y", "=x": "=", " sp ": "z"}


def test_a_request_or_question_id_named_wrongly_is_refused_on_one_line(redis_url: str) -> None:
    agent_says(redis_url, "lead", "alpha", DELEGATE)
    agent_says(redis_url, "asker", "beta", clarify("asker"))
    coordinate(redis_url)
    [request] = [d["request_id"] for d in orjson.loads(ok(redis_url, "inbox", "--json"))["delegations"]]
    published = len(said(redis_url))
    elsewhere = cli(redis_url, "approve", request, "--group", "beta")
    assert elsewhere.returncode == 1
    assert f"no delegation request {request!r} in group 'beta'" in elsewhere.stderr
    for args, message in [
        (["answer", "asker", "Q\n1=x"], "agent 'asker' has no question Q\\n1 (its questions: Q1)"),
        (["answer", "asker", "Q\n1=x", "Q\n1 =y"], "Q\\n1 is answered twice"),
        (["answer", "asker", "Q\n1= "], "the answer to Q\\n1 is blank"),
        (["answer", "asker", f"{'Q' * 10_000}=x"], f"agent 'asker' has no question {'Q' * 79}…"),
    ]:
        done = cli(redis_url, *args)
        assert done.returncode in (1, 2), done.stderr
        assert message in done.stderr, done.stderr
        assert len(done.stderr.splitlines()[-1]) < 300, done.stderr
    assert len(said(redis_url)) == published


def test_the_views_of_many_groups_read_them_in_a_few_round_trips(redis_url: str) -> None:
    groups = 400

    async def publish() -> None:
        client = await connect(Settings.from_url(redis_url))
        try:
            keys = await open_namespace(client, DEFAULT_NAMESPACE, 8)
            asked = [
                new_envelope(
                    ClarificationNeeded(
                        agent_id=f"a{n}",
                        blocked_at="x",
                        reason="r",
                        questions=[Question(question_id="Q1", text="?")],
                    ),
                    agent_id=f"a{n}",
                    group_id=f"g{n}",
                    source="test",
                )
                for n in range(groups)
            ]
            await Publisher(client, keys).publish_many(asked)
        finally:
            await client.aclose()

    asyncio.run(publish())
    coordinate(redis_url)
    server = redis.Redis.from_url(redis_url)

    def reads(*args: str) -> int:
        before = int(server.info("stats")["total_reads_processed"])
        out = ok(redis_url, *args)
        assert out
        return int(server.info("stats")["total_reads_processed"]) - before

    # a round trip per group would be more than a thousand reads
    assert reads("status") < 200
    assert reads("inbox") < 200
    assert reads("answer", "a7", "Q1=x", "--wait", "0") < 200
    assert reads("findings", "--merged") < 200
    assert orjson.loads(ok(redis_url, "status", "--json"))[-1]["group_id"] == "g99"
    server.close()


@pytest.mark.parametrize("command", ["answer", "resolve", "recover", "approve", "deny", "dismiss"])
def test_each_human_command_says_what_becomes_of_it_without_a_coordinator(command: str) -> None:
    text = " ".join(cli("redis://127.0.0.1:1", command, "--help").stdout.split())
    assert "exit status 1 when it rejects or dead-letters the command" in text
    assert "With no coordinator running, the command waits on the bus until one applies it" in text


def test_the_decision_printed_for_a_command_is_the_one_about_its_own_agent(redis_url: str) -> None:
    """A rule may decide a launch first (the delegate an approval starts, a resume launch): the command
    prints its own decision, which may say that its agent still waits."""
    command = new_envelope(HumanApprove(request_id="dlg-1"), agent_id="lead", group_id="g", source="human")

    def decided(agent_id: str, decision: DecisionType, detail: str) -> bytes:
        payload = Decision(decision=decision, detail=detail, cause=command.id)
        return encode(new_envelope(payload, agent_id=agent_id, group_id="g", source="coordinator"))

    async def scenario() -> Decision | str | None:
        client = await connect(Settings.from_url(redis_url))
        try:
            await client.xadd(
                "decisions", {"data": decided("agent-x", DecisionType.LAUNCH_REQUESTED, "launch")}
            )
            await client.xadd("decisions", {"data": decided("lead", DecisionType.DELEGATION_APPROVED, "ok")})
            return await _decision(client, {"decisions": "0-0"}, command, ("signals", "1-0"), 5)
        finally:
            await client.aclose()

    found = asyncio.run(scenario())
    assert isinstance(found, Decision)
    assert (found.decision, found.detail) == (DecisionType.DELEGATION_APPROVED, "ok")


def test_a_command_applied_while_inbox_reads_is_shown_applied_not_queued(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queue is read first, the states after it: a coordinator that applies the command in between
    leaves it in the first read, and the states say what became of it."""
    agent_says(redis_url, "racer", "g-race", clarify("racer"))
    coordinate(redis_url)
    ok(redis_url, "answer", "racer", "Q1=JWT")  # queued: no coordinator runs
    real = load_summaries

    async def applied_meanwhile(*args: Any, **kwargs: Any) -> Any:
        await asyncio.to_thread(coordinate, redis_url)
        return await real(*args, **kwargs)

    monkeypatch.setattr(views_cli, "load_summaries", applied_meanwhile)
    monkeypatch.setenv("SUBAGENT_BUS_REDIS_URL", redis_url)
    shown = CliRunner().invoke(views_cli.inbox, [])
    assert shown.exit_code == 0, shown.output
    assert "queued" not in shown.output and "racer" not in shown.output, shown.output


def hold_lease(url: str, group: str) -> None:
    """A lease on the group's shard, as a coordinator holds it: a command then waits for its decision."""

    async def held() -> None:
        client = await connect(Settings.from_url(url))
        try:
            keys = await open_namespace(client, DEFAULT_NAMESPACE, create=False)
            await client.set(lease_key(keys, keys.shard_of(group)), "coordinator:1", px=60_000)
        finally:
            await client.aclose()

    asyncio.run(held())


def test_a_command_whose_decision_cannot_be_read_says_it_is_queued_not_failed(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Published, then the server went away (a cluster slot half-migrated, say) while its decision was
    waited for: the command is on the bus and will be applied, so it is no failure (exit 0)."""
    agent_says(redis_url, "unread", "g-unread", clarify("unread"))
    coordinate(redis_url)

    hold_lease(redis_url, "g-unread")  # a coordinator holds the shard: the decision is waited for

    async def unreadable(*args: Any) -> None:
        raise ConnectionFailed("Redis unavailable (ClusterError): TTL exhausted.")

    monkeypatch.setattr(human_publish, "_decision", unreadable)
    monkeypatch.setenv("SUBAGENT_BUS_REDIS_URL", redis_url)
    done = CliRunner().invoke(human.answer, ["unread", "Q1=JWT"])
    assert done.exit_code == 0, done.output
    assert (
        "(its decision could not be read: Redis unavailable (ClusterError): TTL exhausted.); a" in done.output
    )
    assert [e["type"] for e in said(redis_url) if e["agent_id"] == "unread"][-1] == "ANSWER"


@pytest.mark.usefixtures("interruptible")
def test_ctrl_c_while_a_decision_is_waited_for_says_the_command_was_published(redis_url: str) -> None:
    """Ctrl-C reads as "cancelled": a command interrupted after it was published said nothing, and a
    coordinator applied it later all the same."""
    agent_says(redis_url, "waiter", "g-waiter", clarify("waiter"))
    coordinate(redis_url)

    hold_lease(redis_url, "g-waiter")  # a coordinator holds the shard (paused, say)
    env = {**os.environ, "SUBAGENT_BUS_REDIS_URL": redis_url}
    process = subprocess.Popen(
        [CLI, "answer", "waiter", "Q1=JWT", "--wait", "60"], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        until(lambda: any(e["type"] == "ANSWER" for e in said(redis_url)), "the answer to be published")
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
    [answer] = [e for e in said(redis_url) if e["type"] == "ANSWER"]
    assert process.returncode == 130, err
    assert f"interrupted: answer {answer['id']} was published before, and a coordinator decides it" in err
