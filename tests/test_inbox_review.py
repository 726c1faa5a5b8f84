"""What waits for a human, through the real CLI: agents publish through `adapter stdin`, a `coordinator
--burst` applies it, and `status`, `inbox` and `findings --merged` show it.

- Agents that disagree on a finding's severity put the group up for review (seed 001: conflicting
  findings -> flag for human review) until their reports agree.
- Questions, blockers and delegations come with what the seeds have the parent present: a question's
  context, why the agent asks and what would unblock it; what a blocker needs; why a delegation, its
  context, coordination and estimate (seed 003's delegation checklist).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from test_human_commands import DELEGATE, agent_says, clarify, coordinate, ok

GROUP = "audit"


@pytest.fixture(autouse=True)
def _scratch_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a command that missed the URL would start a server in the current dir


def _result(agent_id: str, heading: str, severity: str, confidence: int) -> str:
    return f"""## {heading} Result

### Status
SUCCESS

### Summary
Reviewed the JWT configuration.

### Findings

| ID | Issue | File:Line | Severity | Confidence |
|----|-------|-----------|----------|------------|
| SEC-001 | Hardcoded JWT secret | `src/config/jwt.ts:8` | {severity} | {confidence} |

### Confidence
70 - read the file

[COMPLETION_REPORT]
agent_id: {agent_id}
timestamp: 2026-01-11T12:00:00-05:00
status: success
summary: Reviewed the JWT configuration
[/COMPLETION_REPORT]
"""


def _group_statuses(url: str) -> list[str]:
    out = ok(url, "tail", "--stream", "events", "--from", "0", "--timeout", "0.5", "--json")
    events = [orjson.loads(line)["payload"] for line in out.splitlines()]
    return [e["detail"] for e in events if e["decision"] == "group_status"]


def _status(url: str) -> dict[str, Any]:
    [group] = orjson.loads(ok(url, "status", "--json"))
    return dict(group)


def test_agents_that_disagree_on_a_severity_wait_for_a_review(redis_url: str) -> None:
    agent_says(redis_url, "auditor", GROUP, _result("auditor", "Security Auditor", "Critical", 95))
    agent_says(redis_url, "qa", GROUP, _result("qa", "QA Engineer", "Minor", 78))
    coordinate(redis_url)

    group = _status(redis_url)
    assert (group["status"], group["findings"], group["severity_conflicts"]) == ("review", 1, 1)
    assert _group_statuses(redis_url)[-1] == (
        "review: 2/2 completed, 0 failed, 0 active; "
        "1 merged finding(s) whose agents disagree on severity, for review"
    )
    status = ok(redis_url, "status").splitlines()
    assert status[0].startswith(f"group {GROUP}: 2/2 completed, 0 failed, 0 active, verdict review")
    assert status[-1] == (
        f"  * 1 severity conflict(s): review with `subagent-bus findings --merged --group {GROUP}`"
    )
    assert ok(redis_url, "inbox").splitlines() == [
        f"review    group {GROUP}: 1 merged finding(s) whose agents disagree on severity",
        f"          review: subagent-bus findings --merged --group {GROUP}",
    ]
    assert orjson.loads(ok(redis_url, "inbox", "--json"))["conflicts"] == [
        {"group_id": GROUP, "severity_conflicts": 1}
    ]
    # the command the inbox names lists the finding, marked, and counts what it marked
    merged = ok(redis_url, "findings", "--merged", "--group", GROUP).splitlines()
    assert merged[0].endswith("Hardcoded JWT secret  CONFLICT")
    assert merged[-1] == "1 merged finding, 1 with conflicting severities (CONFLICT)"
    [record] = orjson.loads(ok(redis_url, "findings", "--merged", "--json"))
    assert record["severity_conflict"] and record["severities"] == ["critical", "minor"]
    replayed = ok(redis_url, "replay", "--group", GROUP).splitlines()
    assert (
        replayed[-1]
        == f"1 merged finding recomputed for group {GROUP!r}, 1 with conflicting severities (CONFLICT)"
    )

    # qa's better report agrees with the auditor's: nothing is left to review, and the group goes on
    finding = {"id": "SEC-001", "title": "Hardcoded JWT secret", "file": "src/config/jwt.ts", "line": 8}
    agreed = orjson.dumps({**finding, "severity": "critical", "confidence": 90, "agent": "QA Engineer"})
    ok(redis_url, "findings", "add", "--agent-id", "qa", "--group", GROUP, agreed.decode())
    coordinate(redis_url)
    group = _status(redis_url)
    assert (group["status"], group["severity_conflicts"]) == ("continue", 0)
    assert _group_statuses(redis_url)[-1] == "continue: 2/2 completed, 0 failed, 0 active"
    assert ok(redis_url, "inbox").strip() == "nothing waits for a human"
    assert orjson.loads(ok(redis_url, "inbox", "--json"))["conflicts"] == []
    assert ok(redis_url, "findings", "--merged").splitlines()[-1] == "1 merged finding"


RESOURCE_LIMIT = """[STOP_WORK]
agent_id: big
timestamp: 2026-01-11T09:30:00-05:00
stop_reason: blocker
blocker_type: resource_limit
details: Analysis of 10,000+ files will exceed reasonable task duration
resume_requirements: |
  Option 1: Reduce scope (specify file patterns to exclude)
  Option 2: Delegate to multiple agents (see DELEGATE_WORK protocol)
  Option 3: Continue with single agent (accept 6+ hour runtime)
[/STOP_WORK]
"""


UNREAD = (  # `adapter stdin` ends with its pipe, and nobody reads the agent's inbox until one runs again
    "          note: its adapter ended with it: the directive waits in its inbox until an adapter (--deliver) "
    "or `listen` runs for it"
)


def test_the_inbox_shows_what_the_seeds_have_the_parent_present(redis_url: str) -> None:
    agent_says(redis_url, "asker", GROUP, clarify("asker"))
    agent_says(redis_url, "big", GROUP, RESOURCE_LIMIT)
    agent_says(redis_url, "lead", GROUP, DELEGATE)
    coordinate(redis_url)

    inbox = orjson.loads(ok(redis_url, "inbox", "--json"))
    [question] = inbox["questions"]
    assert (question["context"], question["reason"], question["can_resume_with"]) == (
        "both exist",
        "Two strategies found",
        "an answer",
    )
    [blocker] = inbox["blockers"]
    assert blocker["resume_requirements"].splitlines()[2] == (
        "Option 3: Continue with single agent (accept 6+ hour runtime)"
    )
    [delegation] = inbox["delegations"]
    request = delegation["request_id"]
    assert {k: delegation[k] for k in ("delegation_reason", "context_required", "coordination")} == {
        "delegation_reason": "The API documentation is a separate, large job",
        "context_required": "src/api",
        "coordination": "none",
    }
    assert delegation["estimated_duration"] == "1h"
    assert orjson.loads(ok(redis_url, "status", "--json"))[0]["open_questions"][0]["context"] == "both exist"

    assert ok(redis_url, "inbox").splitlines() == [
        "question  asker Q1: OAuth2 or JWT?",
        "          context: both exist",
        "          reason: Two strategies found",
        "          can resume with: an answer",
        '          answer: subagent-bus answer asker Q1="..."',
        UNREAD,
        "blocker   big (resource_limit): Analysis of 10,000+ files will exceed reasonable task duration",
        "          needs: Option 1: Reduce scope (specify file patterns to exclude) Option 2: Delegate to "
        "multiple agents (see DELEGATE_WORK protocol) Option 3: Continue with single agent (accept 6+ hour "
        "runtime)",
        '          resolve: subagent-bus resolve big --resolution "..."',
        "          or recover: subagent-bus recover big --option delegate  # or --option skip_and_continue",
        UNREAD,
        f"delegate  {request} from lead (P2, optional): Document every deprecated endpoint in the public "
        "API and propose removal dates",
        "          reason: The API documentation is a separate, large job (estimated 1h)",
        "          context: src/api",
        "          coordination: none",
        f"          subagent-bus approve {request}  |  subagent-bus deny {request} --reason ...",
        UNREAD,
    ]
