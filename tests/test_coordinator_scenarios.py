"""Every seed scenario end to end: agent text -> parser -> bus -> a real coordinator process -> CLI.

Agents' output is parsed from the seeds' own signal text and published as an adapter would; the
coordinator runs as `subagent-bus coordinator --burst` (a real process that applies what is pending and
exits); humans act through the CLI; what the agents receive is read back from their inbox streams.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from agents.parser import ResultItem, SignalItem, parse_text
from bus.connection import connect
from bus.envelope import Payload, new_envelope
from bus.events import AgentExited, AgentStarted
from bus.findings import Finding
from bus.keys import open_namespace
from bus.publisher import Publisher
from bus.settings import Settings
from coordinator.cli import _attach

CLI = str(Path(sys.executable).parent / "subagent-bus")
GROUP = "audit"


def sb(url: str, *args: str) -> str:
    done = subprocess.run(
        [CLI, *args, "--redis-url", url], check=False, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done.stdout


def coordinate(url: str) -> None:
    sb(url, "coordinator", "--burst", "--lease-ttl", "1000")


def publish(url: str, agent_id: str, *payloads: Payload) -> None:
    async def go() -> None:
        client = await connect(Settings.from_url(url))
        keys = await open_namespace(client, "sbus")
        envelopes = [new_envelope(p, agent_id=agent_id, group_id=GROUP, source="test") for p in payloads]
        await Publisher(client, keys).publish_many(envelopes)
        await client.aclose()

    asyncio.run(go())


def emit(url: str, agent_id: str, text: str) -> None:
    """Publish what an agent printed, parsed like an adapter parses it."""
    items = parse_text(text)
    payloads: list[Payload] = []
    for item in items:
        assert isinstance(item, SignalItem | ResultItem), item
        payloads.append(item.payload if isinstance(item, SignalItem) else item.report)
    publish(url, agent_id, *payloads)


def inbox(url: str, agent_id: str) -> list[dict[str, Any]]:
    out = sb(url, "tail", "--stream", f"inbox:{agent_id}", "--from", "0", "--timeout", "0.5", "--json")
    return [orjson.loads(line) for line in out.splitlines() if line.strip()]


def status(url: str) -> dict[str, Any]:
    groups = orjson.loads(sb(url, "status", "--json"))
    return next(g for g in groups if g["group_id"] == GROUP)


def agent(url: str, agent_id: str) -> dict[str, Any]:
    return next(a for a in status(url)["agents"] if a["agent_id"] == agent_id)


def tasks(url: str) -> list[dict[str, Any]]:
    out = sb(url, "tail", "--stream", "tasks", "--from", "0", "--timeout", "0.5", "--json")
    return [orjson.loads(line) for line in out.splitlines() if line.strip()]


CLARIFY = """[CLARIFICATION_NEEDED]
agent_id: bg-task-abc123
timestamp: 2026-01-11T08:45:00-05:00
blocked_at: Analyzing authentication patterns in src/auth/
reason: Multiple authentication strategies found, unclear which to analyze
questions:
  - question_id: Q1
    text: Should I analyze OAuth2, JWT, or both authentication strategies?
    context: Found separate implementations in src/auth/oauth.ts and src/auth/jwt.ts
  - question_id: Q2
    text: What security framework version should I assume (2.0 or 3.0)?
    context: Dependencies show both @auth/core@2.x and @auth/core@3.x-beta
can_resume_with: Answers specifying which auth strategies to analyze and framework version assumptions
current_state: Completed secret scanning (found 0 hardcoded secrets), started auth analysis
[/CLARIFICATION_NEEDED]
"""


def test_clarification_answered_becomes_the_resume_prompt(redis_url: str) -> None:
    emit(redis_url, "bg-task-abc123", CLARIFY)
    coordinate(redis_url)
    assert agent(redis_url, "bg-task-abc123")["state"] == "awaiting_clarification"
    pending = orjson.loads(sb(redis_url, "inbox", "--json"))["questions"]
    assert [q["question_id"] for q in pending] == ["Q1", "Q2"]

    sb(redis_url, "answer", "bg-task-abc123", "Q1=Analyze both OAuth2 and JWT. They are both in active use.",
       "Q2=Assume 3.0-beta. We are migrating to 3.x.")  # fmt: skip
    coordinate(redis_url)
    [directive] = inbox(redis_url, "bg-task-abc123")
    assert directive["type"] == "CLARIFICATION_RESPONSE"
    answers = directive["payload"]["answers"]
    assert [(a["question_id"], a["answer"]) for a in answers] == [
        ("Q1", "Analyze both OAuth2 and JWT. They are both in active use."),
        ("Q2", "Assume 3.0-beta. We are migrating to 3.x."),
    ]
    assert answers[0]["question"] == "Should I analyze OAuth2, JWT, or both authentication strategies?"
    assert directive["payload"]["continue_from"] == "Analyzing authentication patterns in src/auth/"
    assert agent(redis_url, "bg-task-abc123")["state"] == "running"


def test_unknown_question_is_refused_before_anything_is_published(redis_url: str) -> None:
    emit(redis_url, "bg-task-abc123", CLARIFY)
    coordinate(redis_url)
    done = subprocess.run(
        [CLI, "answer", "bg-task-abc123", "Q7=x", "--redis-url", redis_url],
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert "agent 'bg-task-abc123' has no question Q7 (its questions: Q1, Q2)" in done.stderr
    assert "ANSWER" not in sb(redis_url, "tail", "--stream", "signals", "--from", "0", "--timeout", "0.5")


STOP = """[STOP_WORK]
agent_id: bg-task-def456
timestamp: 2026-01-11T09:15:00-05:00
stop_reason: blocker
blocker_type: external_dependency
details: Security analysis requires running npm audit, but node_modules is missing
completed_work: |
  ✓ Scanned for hardcoded secrets (0 found)
blocked_work: |
  ✗ Dependency vulnerability scan (requires npm audit)
state_snapshot: |
  Files analyzed: 47/120
  Reports generated: AUTH_ANALYSIS.md, SQL_REVIEW.md
resume_requirements: |
  Run: npm install (in parent session)
[/STOP_WORK]
"""


def test_stop_work_resolved_resumes_with_the_state_restored(redis_url: str) -> None:
    emit(redis_url, "bg-task-def456", STOP)
    coordinate(redis_url)
    assert agent(redis_url, "bg-task-def456")["state"] == "blocked"
    sb(redis_url, "resolve", "bg-task-def456", "--resolution", "Ran npm install successfully")
    coordinate(redis_url)
    [directive] = inbox(redis_url, "bg-task-def456")
    assert directive["type"] == "BLOCKER_RESOLVED"
    payload = directive["payload"]
    assert payload["resolution"] == "Ran npm install successfully"
    assert "Files analyzed: 47/120" in payload["state_restoration"]
    assert payload["issue"].startswith("Security analysis requires running npm audit")
    assert agent(redis_url, "bg-task-def456")["state"] == "running"


def delegate(agent_id: str, independence: str, priority: str, task: str) -> str:
    return f"""[DELEGATE_WORK]
agent_id: {agent_id}
timestamp: 2026-01-11T10:00:00-05:00
delegation_reason: Discovered large-scale refactoring opportunity that should run in parallel
new_task_description: |
  {task}
independence: {independence}
priority: {priority}
context_required: Current authentication analysis (see AUTH_ANALYSIS.md)
coordination: Both complete before final security report
estimated_duration: 2-3 hours
[/DELEGATE_WORK]
"""


def test_parallel_delegation_is_approved_and_launched(redis_url: str) -> None:
    task = "Refactor authentication module to use unified AuthProvider pattern across OAuth2 and JWT"
    emit(redis_url, "bg-task-jkl012", delegate("bg-task-jkl012", "can_proceed_parallel", "P1", task))
    coordinate(redis_url)
    [launch] = tasks(redis_url)
    assert launch["type"] == "LAUNCH"
    assert launch["payload"]["reason"] == "delegation"
    assert task in launch["payload"]["task"]
    [directive] = inbox(redis_url, "bg-task-jkl012")
    assert directive["type"] == "DELEGATION_APPROVED"
    assert directive["payload"]["new_agent_id"] == launch["payload"]["new_agent_id"]
    assert agent(redis_url, "bg-task-jkl012")["state"] == "running"


def test_p2_delegation_waits_for_a_human_who_denies_it(redis_url: str) -> None:
    task = "Document every deprecated endpoint in the public API and propose removal dates"
    emit(redis_url, "bg-task-jkl012", delegate("bg-task-jkl012", "optional", "P2", task))
    coordinate(redis_url)
    [pending] = orjson.loads(sb(redis_url, "inbox", "--json"))["delegations"]
    assert tasks(redis_url) == []
    sb(redis_url, "deny", pending["request_id"], "--reason", "Refactoring should be deferred",
       "--alternative", "Document refactoring recommendations in final report",
       "--instructions", "Add refactoring recommendations to SECURITY_RECOMMENDATIONS.md")  # fmt: skip
    coordinate(redis_url)
    [directive] = inbox(redis_url, "bg-task-jkl012")
    assert directive["type"] == "DELEGATION_DENIED"
    assert directive["payload"]["reason"] == "Refactoring should be deferred"
    assert directive["payload"]["alternative"] == "Document refactoring recommendations in final report"
    instructions = "Add refactoring recommendations to SECURITY_RECOMMENDATIONS.md"
    assert directive["payload"]["resume_instructions"] == instructions
    assert tasks(redis_url) == []
    for command in (["approve", pending["request_id"]], ["deny", pending["request_id"], "--reason", "x"]):
        late = subprocess.run([CLI, *command, "--redis-url", redis_url], check=False, capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        assert late.returncode == 1, late.stderr
        assert f"delegation request {pending['request_id']!r} is already denied" in late.stderr


def completion(agent_id: str, status: str) -> str:
    return f"""[COMPLETION_REPORT]
agent_id: {agent_id}
timestamp: 2026-01-11T12:00:00-05:00
status: {status}
deliverables: |
  - TEST_INFRA.md (how to run the security tests)
summary: Set up the security testing infrastructure
[/COMPLETION_REPORT]
"""


WAIT_STOP = """[STOP_WORK]
agent_id: bg-task-mno345
timestamp: 2026-01-11T10:31:00-05:00
stop_reason: blocker
blocker_type: external_dependency
details: Security testing needs the infrastructure the delegated agent sets up
blocked_work: |
  Security testing of the auth scenarios
[/STOP_WORK]
"""


def test_blocking_delegation_resumes_the_requester_when_the_delegate_completes(redis_url: str) -> None:
    task = "Set up security testing infrastructure: OWASP ZAP, auth fixtures, mock API server"
    emit(redis_url, "bg-task-mno345", delegate("bg-task-mno345", "blocks_current_work", "P0", task))
    coordinate(redis_url)
    [launch] = tasks(redis_url)
    child = launch["payload"]["new_agent_id"]
    assert agent(redis_url, "bg-task-mno345")["state"] == "delegating"
    # the seed's coordination: "This agent: Will STOP_WORK until infrastructure ready"
    emit(redis_url, "bg-task-mno345", WAIT_STOP)
    coordinate(redis_url)
    assert agent(redis_url, "bg-task-mno345")["state"] == "delegating"
    assert status(redis_url)["blockers"] == []  # nothing for a human: the delegate's results resume it
    publish(redis_url, child, AgentStarted(task=launch["payload"]["task"]))
    emit(redis_url, child, completion(child, "success"))
    coordinate(redis_url)
    directives = inbox(redis_url, "bg-task-mno345")
    assert [d["type"] for d in directives] == ["DELEGATION_APPROVED", "DELEGATION_COMPLETED"]
    done = directives[1]["payload"]
    assert done["delegate_agent_id"] == child
    assert "TEST_INFRA.md" in done["deliverables"]
    assert agent(redis_url, "bg-task-mno345")["state"] == "running"


def test_failed_agent_is_retried_once_then_escalated(redis_url: str) -> None:
    publish(redis_url, "scanner", AgentStarted(task="Scan every module for SQL injection", name="scanner"))
    publish(redis_url, "scanner", AgentExited(exit_code=3))
    coordinate(redis_url)
    [retry] = tasks(redis_url)
    assert retry["payload"]["reason"] == "retry"
    assert retry["payload"]["attempt"] == 2
    second = retry["payload"]["new_agent_id"]
    publish(redis_url, second, AgentStarted(task=retry["payload"]["task"]))
    emit(redis_url, second, completion(second, "failed"))
    coordinate(redis_url)
    assert len(tasks(redis_url)) == 1, "only one retry"
    escalations = orjson.loads(sb(redis_url, "inbox", "--json"))["escalations"]
    assert [e["agent_id"] for e in escalations] == [second]
    assert f"escalated {second}: " in sb(redis_url, "inbox")


def _report(agent_name: str, confidence: int, severity: str) -> str:
    return f"""## {agent_name} Result

### Status
SUCCESS

### Summary
Reviewed the authentication module.

### Findings

#### Issues Detected

| ID | Issue | File:Line | Severity | Confidence |
|----|-------|-----------|----------|------------|
| SEC-001 | Hardcoded JWT secret | `src/config/jwt.ts:8` | {severity} | {confidence} |

### Confidence
{confidence} - Issues verified with code evidence
"""


def test_a_report_that_did_not_reach_the_coordinator_outlives_the_completion_after_it(redis_url: str) -> None:
    """A report the adapter cannot read becomes a blocker; the agent's COMPLETION_REPORT right after it
    must not make the group look done with nothing lost."""
    broken = _report("Security Auditor", 95, "Critical").replace("### Summary\n", "### Sumary\n")
    printed = broken + "\n" + completion("auditor", "success")
    adapter = [CLI, "adapter", "stdin", "--agent-id=auditor", "--group", GROUP, "--redis-url", redis_url]
    done = subprocess.run(adapter, input=printed, check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "missing or empty '### Summary' section" in done.stderr
    coordinate(redis_url)
    group = status(redis_url)
    assert group["status"] == "review" and agent(redis_url, "auditor")["state"] == "completed"
    [violation] = agent(redis_url, "auditor")["violations"]
    assert violation.startswith(
        "unresolved_blocker: error: The agent printed a result report (line 1) that did not reach the "
        "coordinator: result report 'Security Auditor' at line 1: missing or empty '### Summary' section"
    ), violation
    assert "violations: unresolved_blocker: " in sb(redis_url, "status")


def test_a_report_under_another_heading_is_named_when_the_agent_completes_without_one(redis_url: str) -> None:
    """``## Security Auditor Results`` is no report (an agent's own ``## Test Results`` is not its
    result); but when the agent completes without a report, its findings must not vanish unsaid."""
    unread = _report("Security Auditor", 95, "Critical").replace(" Result\n", " Results\n", 1)
    printed = "Auditing.\n" + unread + "\n" + completion("auditor", "success")
    adapter = [CLI, "adapter", "stdin", "--agent-id=auditor", "--group", GROUP, "--redis-url", redis_url]
    done = subprocess.run(adapter, input=printed, check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    coordinate(redis_url)
    assert status(redis_url)["status"] == "review" and agent(redis_url, "auditor")["state"] == "completed"
    [violation] = agent(redis_url, "auditor")["violations"]
    assert violation.startswith(
        "unresolved_blocker: error: The agent printed a result report (line 2) that did not reach the "
        "coordinator: the section '## Security Auditor Results' reads as a result report (1 finding) but was "
        "not read as one: only a '## <Agent Name> Result' heading starts a report."
    ), violation
    assert "if it has finished, nothing resumes it" in violation  # it has: not told to resolve it
    inbox = sb(redis_url, "inbox")
    assert inbox.startswith("review    auditor finished with a blocker unresolved: error: The agent printed")
    [item] = orjson.loads(sb(redis_url, "inbox", "--json"))["unresolved"]
    assert (item["group_id"], item["agent_id"]) == (GROUP, "auditor") and violation.endswith(item["blocker"])


def test_overlapping_findings_of_three_agents_merge_by_the_seed_rules(redis_url: str) -> None:
    emit(redis_url, "auditor", _report("Security Auditor", 95, "Critical"))
    emit(redis_url, "qa", _report("QA Engineer", 78, "Critical"))
    publish(redis_url, "linter", Finding(id="LINT-7", title="Unused import", file="src/app.ts", line=3,
                                         severity="minor", confidence=60, agent="linter"))  # fmt: skip
    coordinate(redis_url)
    merged = orjson.loads(sb(redis_url, "findings", "--merged", "--json"))
    by_location = {m["location"]: m for m in merged}
    assert set(by_location) == {"src/config/jwt.ts:8", "src/app.ts:3"}
    sec = by_location["src/config/jwt.ts:8"]
    assert sec["confidence"] == pytest.approx(96.5)  # (95 + 78) / 2 + 10
    assert sec["agents"] == ["qa-engineer", "security-auditor"]
    assert sec["finding"]["confidence"] == 95
    raw = orjson.loads(sb(redis_url, "findings", "--json"))
    assert len(raw) == 3
    assert [orjson.loads(line) for line in sb(redis_url, "findings", "--jsonl").splitlines()] == raw
    both = subprocess.run([CLI, "findings", "--json", "--jsonl", "--redis-url", redis_url], check=False,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert both.returncode == 2 and "--json and --jsonl exclude each other" in both.stderr
    replayed = orjson.loads(sb(redis_url, "replay", "--group", GROUP, "--json"))
    assert replayed == merged

    # the same views as text
    raw_lines = sb(redis_url, "findings").splitlines()
    assert raw_lines[-1] == "3 findings"
    assert "src/config/jwt.ts:8 critical Hardcoded JWT secret (security-auditor)" in raw_lines
    merged_lines = sb(redis_url, "findings", "--merged").splitlines()
    assert merged_lines[-1] == "2 merged findings"
    [sec_line] = [line for line in merged_lines if line.startswith("src/config/jwt.ts:8")]
    assert sec_line.split() == [
        "src/config/jwt.ts:8", "SEC", "critical", "96.5", "qa-engineer,", "security-auditor",
        "Hardcoded", "JWT", "secret",
    ]  # fmt: skip
    replay_lines = sb(redis_url, "replay", "--group", GROUP).splitlines()
    assert replay_lines == [*merged_lines[:-1], f"2 merged findings recomputed for group {GROUP!r}"]


def test_the_text_views_show_what_waits_and_the_commands_that_act_on_it(redis_url: str) -> None:
    emit(redis_url, "bg-task-abc123", CLARIFY)
    emit(redis_url, "bg-task-def456", STOP)
    task = "Document every deprecated endpoint in the public API and propose removal dates"
    emit(redis_url, "bg-task-jkl012", delegate("bg-task-jkl012", "optional", "P2", task))
    coordinate(redis_url)
    [pending] = orjson.loads(sb(redis_url, "inbox", "--json"))["delegations"]
    request = pending["request_id"]

    view = sb(redis_url, "status").splitlines()
    assert view[0] == f"group {GROUP}: 0/3 completed, 0 failed, 3 active; 0 merged findings"
    states = {line.split()[0]: line.split()[1] for line in view[1:4]}
    assert states == {
        "bg-task-abc123": "awaiting_clarification",
        "bg-task-def456": "blocked",
        "bg-task-jkl012": "running",  # an optional delegation does not hold its requester up
    }
    assert "  ? bg-task-abc123 Q1: Should I analyze OAuth2, JWT, or both authentication strategies?" in view
    assert "  ! bg-task-def456 blocked (external_dependency): Security analysis requires running npm audit, " \
        "but node_modules is missing" in view  # fmt: skip
    assert f"  > delegation {request} from bg-task-jkl012 (P2) awaits approval" in view

    lines = sb(redis_url, "inbox").splitlines()
    stripped = [line.strip() for line in lines]
    assert 'answer: subagent-bus answer bg-task-abc123 Q1="..."' in stripped
    assert 'resolve: subagent-bus resolve bg-task-def456 --resolution "..."' in stripped
    [approve] = [line for line in lines if f"subagent-bus approve {request}" in line]
    # the command the inbox suggests is one that works
    command = approve.split("|")[0].split()
    assert command == ["subagent-bus", "approve", request]
    sb(redis_url, *command[1:])
    coordinate(redis_url)
    [launch] = tasks(redis_url)
    assert task in launch["payload"]["task"]
    assert request not in sb(redis_url, "inbox")  # the delegation's item is gone


@pytest.mark.usefixtures("interruptible")
def test_status_watch_refreshes_until_interrupted(redis_url: str) -> None:
    emit(redis_url, "bg-task-def456", STOP)
    coordinate(redis_url)
    watch = subprocess.Popen(
        [CLI, "status", "--watch", "0.2", "--redis-url", redis_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert watch.stdout is not None
        heads = 0
        for line in watch.stdout:  # blocks until a refresh prints; two refreshes, then Ctrl-C
            heads += line.startswith("subagent-bus status  (every 0.2s, Ctrl-C to quit)")
            if line.startswith("  ! bg-task-def456 blocked") and heads == 2:
                break
        watch.send_signal(signal.SIGINT)
        assert watch.wait(timeout=30) == 130
    finally:
        if watch.poll() is None:
            watch.kill()


def test_a_bad_policy_file_is_a_usage_error(tmp_path: Path, redis_url: str) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('max_parallel = "x"\n')
    done = subprocess.run(
        [CLI, "coordinator", "--burst", "--policy", str(policy), "--redis-url", redis_url],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "Invalid value for '--policy': " in done.stderr  # given on the command line
    assert f"policy file {policy}: unknown setting 'max_parallel'" in done.stderr
    # refused while the options are read: before a command without a URL starts the local server
    env = {k: v for k, v in os.environ.items() if k != "SUBAGENT_BUS_REDIS_URL"}
    for command in (["replay", "--group", "g"], ["findings", "--merged"], ["up"]):
        refused = subprocess.run([CLI, *command, "--policy", str(policy)], check=False, capture_output=True,
                                 text=True, timeout=60, cwd=tmp_path, env=env)  # fmt: skip
        assert refused.returncode == 2 and "unknown setting 'max_parallel'" in refused.stderr, command
        assert "using local Redis" not in refused.stderr
    assert not (tmp_path / ".subagent-bus").exists()


def test_up_runs_a_coordinator_until_interrupted(tmp_path: Path, redis_url: str) -> None:
    log = tmp_path / "up.log"
    with log.open("wb") as stderr:
        up = subprocess.Popen(
            [CLI, "up", "--redis-url", redis_url, "--shards", "3"], stdout=subprocess.DEVNULL, stderr=stderr
        )
    try:
        deadline = time.monotonic() + 60
        while ": 3 shards in namespace sbus" not in log.read_text():  # up passed --shards on
            assert time.monotonic() < deadline and up.poll() is None, log.read_text()
            time.sleep(0.05)
        emit(redis_url, "bg-task-def456", STOP)
        while not any(a["agent_id"] == "bg-task-def456" for g in _groups(redis_url) for a in g["agents"]):
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)  # polling a separate process's effect; it has no other signal
        assert agent(redis_url, "bg-task-def456")["state"] == "blocked"
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=30) == 0, log.read_text()
    finally:
        if up.poll() is None:
            up.kill()
    text = log.read_text()
    assert f"export SUBAGENT_BUS_REDIS_URL={redis_url} SUBAGENT_BUS_NAMESPACE=sbus" in text
    assert "subagent-bus adapter watch OUTPUT_FILE --agent-id ID --group GROUP" in text
    assert "./.subagent-bus/" not in text  # the local server's word: not this one


def test_up_shows_a_given_urls_password_as_stars() -> None:
    given = Settings.from_url("redis://ops:s3cret-pw@redis.example:6380/0")
    text = _attach(given, local=False, keyed=False)
    assert "s3cret-pw" not in text
    assert "export SUBAGENT_BUS_REDIS_URL='redis://ops:***@redis.example:6380/0' " in text
    assert "(put the password in place of ***)" in text and "./.subagent-bus/" not in text
    local = _attach(Settings.from_url("redis://127.0.0.1:7000/0"), local=True, keyed=False)
    assert "./.subagent-bus/ listens on 127.0.0.1 only" in local and "in place of ***" not in local
    assert "SUBAGENT_BUS_HUMAN_KEY_FILE" not in text + local


def test_up_quotes_its_export_line_for_the_shell() -> None:
    # pasted unquoted, `&` sent the first half to the background, and the URL was never set
    given = Settings.from_url("redis://127.0.0.1:7000/0?client_name=x&health_check_interval=5")
    text = _attach(given, local=False, keyed=False)
    [line] = [line.strip() for line in text.splitlines() if line.strip().startswith("export ")]
    shell = f'{line}\nprintf "%s|%s" "$SUBAGENT_BUS_REDIS_URL" "$SUBAGENT_BUS_NAMESPACE"'
    said = subprocess.run(["sh", "-c", shell], capture_output=True, text=True, timeout=10, check=True)
    assert said.stdout == f"{given.display_url()}|sbus", line


def test_up_with_a_human_key_says_every_coordinator_needs_it() -> None:
    # the banner's `subagent-bus coordinator`, run as printed, applied forged answers on its shards
    text = _attach(Settings.from_url("redis://127.0.0.1:7000/0"), local=True, keyed=True)
    assert "export SUBAGENT_BUS_HUMAN_KEY_FILE=KEY_FILE  # the key given to up: for every coordinator" in text


def _groups(url: str) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = orjson.loads(sb(url, "status", "--json"))
    return groups


ERROR_STOP = """[STOP_WORK]
agent_id: bg-task-err789
timestamp: 2026-01-11T11:00:00-05:00
stop_reason: error
blocker_type: error
details: TypeError in analyze.py line 142 while parsing src/legacy/
completed_work: |
  ✓ Analyzed src/api/ and src/auth/
blocked_work: |
  ✗ Analysis of src/legacy/ (23 files)
state_snapshot: |
  Files analyzed: 60/120
resume_requirements: |
  A decision on how to continue past the error
[/STOP_WORK]
"""


def test_an_error_stop_is_recovered_by_delegating_the_failing_work(redis_url: str) -> None:
    emit(redis_url, "bg-task-err789", ERROR_STOP)
    coordinate(redis_url)
    lines = [line.strip() for line in sb(redis_url, "inbox").splitlines()]
    suggestion = "or recover: subagent-bus recover bg-task-err789 --option retry_from_checkpoint"
    assert f"{suggestion}  # or --option skip_and_continue / delegate" in lines
    sb(redis_url, "recover", "bg-task-err789", "--option", "delegate")
    coordinate(redis_url)
    [launch] = tasks(redis_url)
    assert "Analysis of src/legacy/ (23 files)" in launch["payload"]["task"]
    assert "Files analyzed: 60/120" in launch["payload"]["context"]
    [directive] = inbox(redis_url, "bg-task-err789")
    assert directive["type"] == "ERROR_RECOVERY"
    assert directive["payload"]["option"] == "delegate"
    assert launch["payload"]["new_agent_id"] in directive["payload"]["instructions"]
    out = sb(redis_url, "tail", "--stream", "events", "--from", "0", "--timeout", "0.5", "--json")
    details = [orjson.loads(line)["payload"]["detail"] for line in out.splitlines() if line.strip()]
    assert f"recovery: delegate to {launch['payload']['new_agent_id']}" in details  # `recover` prints it
    assert agent(redis_url, "bg-task-err789")["state"] == "running"
    assert "recover" not in sb(redis_url, "inbox")


def test_human_commands_that_cannot_apply_are_refused_and_publish_nothing(redis_url: str) -> None:
    emit(redis_url, "bg-task-def456", STOP)
    coordinate(redis_url)

    def refused(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [CLI, *args, "--redis-url", redis_url], check=False, capture_output=True, text=True, timeout=60
        )

    malformed = refused("answer", "bg-task-def456", "Q1")
    assert malformed.returncode == 2 and "'Q1' is not QUESTION_ID=answer" in malformed.stderr
    twice = refused("answer", "bg-task-def456", "Q1=yes", "Q1=no")
    assert twice.returncode == 2 and "Q1 is answered twice" in twice.stderr
    not_an_error = refused("recover", "bg-task-def456", "--option", "retry_from_checkpoint")
    assert not_an_error.returncode == 1
    assert (
        "agent 'bg-task-def456' is blocked, not stopped by an error: resolve it instead"
        in not_an_error.stderr
    )
    no_questions = refused("answer", "bg-task-def456", "Q1=yes")
    assert (
        no_questions.returncode == 1 and "agent 'bg-task-def456' has no open questions" in no_questions.stderr
    )
    sb(redis_url, "resolve", "bg-task-def456", "--resolution", "Ran npm install")
    coordinate(redis_url)
    no_blocker = refused("resolve", "bg-task-def456", "--resolution", "again")
    assert no_blocker.returncode == 1 and "agent 'bg-task-def456' has no open blocker" in no_blocker.stderr
    no_error = refused("recover", "bg-task-def456", "--option", "skip_and_continue")
    assert no_error.returncode == 1 and "agent 'bg-task-def456' has no open blocker" in no_error.stderr
    unknown = refused("resolve", "nobody", "--resolution", "x")
    assert unknown.returncode == 1
    assert "no agent 'nobody' is known to the coordinators (known: bg-task-def456)" in unknown.stderr
    no_request = refused("approve", "req-nope")
    assert no_request.returncode == 1
    assert "no delegation request 'req-nope' (see `subagent-bus inbox`)" in no_request.stderr
    signals = sb(redis_url, "tail", "--stream", "signals", "--from", "0", "--timeout", "0.5", "--json")
    assert [orjson.loads(line)["type"] for line in signals.splitlines()] == ["STOP_WORK", "RESOLVE"]


def test_up_with_log_json_writes_nothing_but_json_lines(tmp_path: Path, redis_url: str) -> None:
    # its banner was eleven lines of plain text among the JSON records
    log = tmp_path / "up.log"
    with log.open("wb") as stderr:
        up = subprocess.Popen(
            [CLI, "up", "--redis-url", redis_url, "--log-json"], stdout=subprocess.DEVNULL, stderr=stderr
        )
    try:
        deadline = time.monotonic() + 60
        while "shards in namespace sbus" not in log.read_text():
            assert time.monotonic() < deadline and up.poll() is None, log.read_text()
            time.sleep(0.05)  # polling a separate process's log; it has no other signal
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=30) == 0, log.read_text()
    finally:
        if up.poll() is None:
            up.kill()
    records = [orjson.loads(line) for line in log.read_text().splitlines()]
    [banner] = [r["message"] for r in records if "subagent-bus is up" in r["message"]]
    assert f"export SUBAGENT_BUS_REDIS_URL={redis_url} SUBAGENT_BUS_NAMESPACE=sbus" in banner
