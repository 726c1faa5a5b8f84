"""Scripted agents for ``subagent-bus demo``: small programs that behave like turn-based background agents.

Each run is one turn: the agent prints prose and protocol blocks (paced like a model streaming), then
exits. The adapter resumes it with the parent's directive as ``--prompt``; the heading of that prompt
tells the script which turn it is in, as a real agent's transcript would. Nothing here imports the bus:
the agents only print, exactly like agents that know nothing about this project.

    python -m agents.demo_agent ROLE [--prompt TEXT] [--prompt-file FILE] [--agent-id ID]

Roles: security-auditor, qa-engineer, dependency-scanner, and ``launched`` (an agent started by the
launcher, which reads its task from --prompt-file: a delegated refactor or a retried scan).
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

__all__ = ["main"]

PACE_S = 0.05
"""Pause between printed pieces, so blocks arrive split across reads like a streaming model's output."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def say(text: str) -> None:
    """Print in two halves with a pause between, so the adapter sees blocks split across writes."""
    half = len(text) // 2
    for piece in (text[:half], text[half:]):
        sys.stdout.write(piece)
        sys.stdout.flush()
        time.sleep(PACE_S)


def progress(agent: str, percent: int, message: str) -> None:
    say(
        f"[PROGRESS]\nagent_id: {agent}\ntimestamp: {_now()}\npercent: {percent}\n"
        f"message: {message}\n[/PROGRESS]\n"
    )


def report(
    name: str, rows: list[tuple[str, str, str, str, int]], confidence: int, status: str = "SUCCESS"
) -> None:
    table = "\n".join(f"| {i} | {title} | `{loc}` | {sev} | {conf} |" for i, title, loc, sev, conf in rows)
    say(
        f"""## {name} Result

### Status
{status}

### Summary
Reviewed the authentication module of the demo service.

### Findings

#### Issues Detected

| ID | Issue | File:Line | Severity | Confidence |
|----|-------|-----------|----------|------------|
{table}

### Confidence
{confidence} - Issues verified with code evidence

### Next Steps
1. Fix the critical findings before the next release
"""
    )


def complete(agent: str, summary: str, status: str = "success") -> None:
    say(
        f"""[COMPLETION_REPORT]
agent_id: {agent}
timestamp: {_now()}
status: {status}
deliverables: |
  - SECURITY_ANALYSIS.md (report)
summary: {summary}
total_duration: 2m
[/COMPLETION_REPORT]
"""
    )


def auditor(agent: str, prompt: str) -> None:
    if not prompt:
        say("Starting the security review. I will emit [STOP_WORK] if something blocks me.\n")
        progress(agent, 10, "secret scanning done")
        say(
            f"""[CLARIFICATION_NEEDED]
agent_id: {agent}
timestamp: {_now()}
blocked_at: Analyzing authentication patterns in src/auth/
reason: Multiple authentication strategies found, unclear which to analyze
questions:
  - question_id: Q1
    text: Should I analyze OAuth2, JWT, or both authentication strategies?
    context: Found src/auth/oauth.ts and src/auth/jwt.ts
  - question_id: Q2
    text: What security framework version should I assume (2.0 or 3.0)?
    context: Dependencies show both @auth/core@2.x and @auth/core@3.x-beta
can_resume_with: Which strategies to analyze and which framework version
current_state: Completed secret scanning, started auth analysis
[/CLARIFICATION_NEEDED]
"""
        )
    elif "CLARIFICATION RESPONSE" in prompt:
        progress(agent, 50, "auth analysis under way")
        say(
            f"""[DELEGATE_WORK]
agent_id: {agent}
timestamp: {_now()}
delegation_reason: Discovered a large refactoring opportunity that should run in parallel
new_task_description: |
  Refactor the authentication module to one AuthProvider interface for OAuth2 and JWT
independence: can_proceed_parallel
priority: P1
context_required: AUTH_ANALYSIS.md
coordination: This agent keeps auditing; the new agent refactors src/auth/
estimated_duration: 1h
[/DELEGATE_WORK]
"""
        )
    else:
        progress(agent, 90, "writing the report")
        report("Security Auditor", [("SEC-001", "Hardcoded JWT secret", "src/config/jwt.ts:8", "Critical", 95),
                                    ("SEC-002", "Missing rate limiting", "src/api/auth.ts:45", "Critical", 90)], 94)  # fmt: skip
        complete(agent, "Security review of the auth module finished")


def qa(agent: str, prompt: str) -> None:
    if not prompt:
        progress(agent, 20, "test plan written")
        say(
            f"""[STOP_WORK]
agent_id: {agent}
timestamp: {_now()}
stop_reason: blocker
blocker_type: external_dependency
details: Security tests need npm audit, but node_modules is missing
completed_work: Wrote the test plan
blocked_work: Dependency vulnerability scan
state_snapshot: Tests planned 12/12, written 0/12
resume_requirements: Run npm install, then resume
[/STOP_WORK]
"""
        )
    elif "BLOCKER RESOLVED" in prompt:
        say(
            f"""[DELEGATE_WORK]
agent_id: {agent}
timestamp: {_now()}
delegation_reason: The public API docs are out of date and someone should rewrite them
new_task_description: |
  Rewrite the public API documentation for every endpoint of the demo service
independence: optional
priority: P2
estimated_duration: 3h
[/DELEGATE_WORK]
"""
        )
    else:
        report(
            "QA Engineer", [("SEC-001", "JWT secret in source", "src/config/jwt.ts:8", "Critical", 78)], 80
        )
        complete(agent, "Security tests written and run")


def scanner(agent: str) -> None:
    progress(agent, 30, "scanning dependencies")
    say(
        """## Dependency Scanner Result

### Status
FAILED

### Summary
Unable to complete the scan: the lock file could not be parsed.

### Error Details
| Aspect | Value |
|--------|-------|
| Type | ParseError |
| Message | Unexpected token in package-lock.json |
| Occurred At | package-lock.json:1 |
| Recoverable | true |

### Recovery Options
1. Retry with a reduced scope: only the auth module's dependencies
"""
    )
    complete(agent, "Scan failed on the lock file", status="failed")


def launched(agent: str, prompt_file: str) -> None:
    task = Path(prompt_file).read_text(encoding="utf-8") if prompt_file else ""
    if "AuthProvider" in task:
        progress(agent, 60, "AuthProvider interface extracted")
        complete(agent, "Auth module refactored to one AuthProvider")
        return
    progress(agent, 50, "retry with a reduced scope")
    report(
        "Dependency Scanner",
        [("SEC-001", "Secret key committed", "src/config/jwt.ts:8", "Important", 70)],
        72,
    )
    complete(agent, "Scanned the auth module's dependencies")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("role", choices=["security-auditor", "qa-engineer", "dependency-scanner", "launched"])
    parser.add_argument("--agent-id", default="")
    parser.add_argument("--prompt", default="")
    parser.add_argument("--prompt-file", default="")
    args = parser.parse_args(argv)
    agent = args.agent_id or args.role
    if args.role == "security-auditor":
        auditor(agent, args.prompt)
    elif args.role == "qa-engineer":
        qa(agent, args.prompt)
    elif args.role == "dependency-scanner":
        scanner(agent)
    else:
        launched(agent, args.prompt_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
