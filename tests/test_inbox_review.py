"""What waits for a human, through the real CLI: agents publish through `adapter stdin`, a `coordinator
--burst` applies it, and `status`, `inbox` and `findings --merged` show it.

- Agents that disagree on a finding's severity put the group up for review (seed 001: conflicting
  findings -> flag for human review) until their reports agree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from test_human_commands import agent_says, coordinate, ok

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
    assert merged[-1] == "1 merged findings, 1 with conflicting severities (CONFLICT)"
    [record] = orjson.loads(ok(redis_url, "findings", "--merged", "--json"))
    assert record["severity_conflict"] and record["severities"] == ["critical", "minor"]
    replayed = ok(redis_url, "replay", "--group", GROUP).splitlines()
    assert (
        replayed[-1]
        == f"1 merged findings recomputed for group {GROUP}, 1 with conflicting severities (CONFLICT)"
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
    assert ok(redis_url, "findings", "--merged").splitlines()[-1] == "1 merged findings"
