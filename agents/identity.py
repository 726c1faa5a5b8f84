"""Protocol 1: the identity statement and the templates added to every background task prompt.

:data:`IDENTITY_STATEMENT` is the exact text of seed 000 ("EXECUTION CONTEXT: BACKGROUND SUBAGENT").
:func:`build_prompt` puts it first, then a line naming the agent's id, the templates of the four signals
(seed 000's signal formats, verbatim) and of PROGRESS (the progress-reporting extension), the result
report (seed 001's result contract, :data:`RESULT_TEMPLATE`), and the task under ``## YOUR TASK`` as in
the seed's example integration.

Every signal template keeps its ``<ISO-8601-timestamp>`` placeholder, which is not a valid timestamp, and
the report's heading is the placeholder ``## [Agent Name] Result``, so an agent that echoes its prompt
never has the templates taken for signals or a report.
"""

from __future__ import annotations

from typing import Final

import orjson

from agents import yamlsafe
from bus.errors import ProtocolError

__all__ = [
    "IDENTITY_STATEMENT",
    "PROGRESS_TEMPLATE",
    "RESULT_INSTRUCTIONS",
    "RESULT_TEMPLATE",
    "SIGNAL_TEMPLATES",
    "build_prompt",
    "yaml_text",
]

IDENTITY_STATEMENT: Final = """\
## EXECUTION CONTEXT: BACKGROUND SUBAGENT

**CRITICAL AWARENESS:**
You are executing as a BACKGROUND SUBAGENT in an isolated process.

**Your Constraints:**
- ❌ You CANNOT directly interact with the user
- ❌ You CANNOT access the user's interactive shell
- ❌ You CANNOT use interactive prompts or menus
- ✅ All user communication MUST go through your parent agent
- ✅ Use the protocols below when you need help

**Available Communication Protocols:**
1. CLARIFICATION_NEEDED - Request missing information
2. STOP_WORK - Signal that you cannot proceed
3. DELEGATE_WORK - Request another background agent
4. COMPLETION_REPORT - Signal successful completion

**Your Parent Agent:**
- Monitors your output periodically
- Will respond to protocol signals
- Can resume you with additional context
- Coordinates with the user on your behalf
"""

_CLARIFICATION: Final = """\
[CLARIFICATION_NEEDED]
agent_id: <agent-id>
timestamp: <ISO-8601-timestamp>
blocked_at: <specific task/step/file where work stopped>
reason: <why clarification is needed>
questions:
  - question_id: Q1
    text: <question text>
    context: <why this matters>
  - question_id: Q2
    text: <question text>
    context: <why this matters>
can_resume_with: <what info would unblock>
current_state: <what was completed before blocking>
[/CLARIFICATION_NEEDED]"""

_STOP: Final = """\
[STOP_WORK]
agent_id: <agent-id>
timestamp: <ISO-8601-timestamp>
stop_reason: <why stopping - blocker|error|completion>
blocker_type: <missing_info|external_dependency|error|resource_limit>
details: <description of blocker>
completed_work: <what was finished>
blocked_work: <what could not be started>
state_snapshot: <checkpoint for resume>
resume_requirements: <what is needed to continue>
[/STOP_WORK]"""

_DELEGATE: Final = """\
[DELEGATE_WORK]
agent_id: <requesting-agent-id>
timestamp: <ISO-8601-timestamp>
delegation_reason: <why delegate vs continue>
new_task_description: <what new agent should do>
independence: <can_proceed_parallel|blocks_current_work|optional>
priority: <P0|P1|P2>
context_required: <what context new agent needs>
coordination: <how agents should coordinate>
estimated_duration: <time estimate for new task>
[/DELEGATE_WORK]"""

_COMPLETION: Final = """\
[COMPLETION_REPORT]
agent_id: <agent-id>
timestamp: <ISO-8601-timestamp>
status: <success|partial_success|failed>
deliverables: <list of files/outputs created>
summary: <what was accomplished>
metrics_achieved: <how success criteria were met>
issues_encountered: <problems solved during execution>
recommendations: <follow-up actions>
total_duration: <execution time>
[/COMPLETION_REPORT]"""

PROGRESS_TEMPLATE: Final = """\
[PROGRESS]
agent_id: <agent-id>
timestamp: <ISO-8601-timestamp>
percent: <0-100>
message: <what is being done now>
eta: <estimated time remaining>
[/PROGRESS]"""

SIGNAL_TEMPLATES: Final[tuple[str, ...]] = (_CLARIFICATION, _STOP, _DELEGATE, _COMPLETION, PROGRESS_TEMPLATE)
"""The four signal formats of seed 000, then PROGRESS."""

RESULT_TEMPLATE: Final = """\
## [Agent Name] Result

### Status
[SUCCESS | PARTIAL | FAILED]

### Summary
[2-3 sentence summary of what was accomplished or found]

### Findings

| ID | Issue | File:Line | Severity | Confidence |
|----|-------|-----------|----------|------------|
| [SEC-001] | [What is wrong] | `[file:line]` | [critical/important/minor] | [0-100] |

### Key References
| Item | Location | Relevance |
|------|----------|-----------|
| [Name] | `[file:line]` | [Why important] |

### Confidence
[0-100] - [Brief justification]
verified_confidence: [0-100] ([direct code evidence: what you read or ran])
inferred_confidence: [0-100] ([pattern analysis and assumptions])

### Confidence Justification
- Score: [0-100]
- Evidence Count: [N findings with direct code evidence]
- Verification Method: [How findings were verified]
- Potential Blind Spots: [What might have been missed]

### Issues (if any)
- [Issue 1]: [Description] | Severity: [critical/important/minor]

### Next Steps (if applicable)
1. [Recommended action 1]

### Blockers (if any)
- [Blocker description] | Resolution: [What's needed]"""
"""Seed 001's result contract, laid out as the adapter reads it: one findings table row per issue found."""

RESULT_INSTRUCTIONS: Final = """\
When your work is done, print your result as a report in this form (the result contract), then your
COMPLETION_REPORT. Name your role in the heading, exactly as `## <Role> Result` (`## Security Auditor
Result`; not `Results`, not `#` or `###`): only that heading starts a report. `### Status` and
`### Summary` are required: a report without them does not reach your parent. `### Confidence` (your
score, 0-100) is expected: a report without it is marked as breaking the contract. Every issue you
found is one row of the Findings table with its `file:line`: those rows are what your parent merges
with the findings of other agents (with nothing found, write `None` under Findings instead of the
table). Start each finding's ID with its category (`SEC-001` for security, `PERF-` for performance,
`BUG-`...): two agents' findings at one `file:line` are merged only when their categories agree. Give the
verified/inferred breakdown when your confidence is 75 or more, and the Confidence Justification when it
is 85 or more; leave out the sections marked "if any" or "if applicable" that you have nothing for.
"""

_HOW_TO_SIGNAL: Final = """\
## PROTOCOL SIGNALS

Print a signal as a block in exactly this form: the opening tag alone on its line, YAML fields, the
closing tag alone on its line. Use the real values (your agent id, an ISO-8601 timestamp with a time
zone), never the <placeholders>. In YAML, " #" starts a comment: put a value that holds one in quotes,
or write long text as a `|` block. After CLARIFICATION_NEEDED or STOP_WORK, stop and wait: your parent
resumes you with the answer.
"""


def build_prompt(task: str, agent_id: str | None = None) -> str:
    """The prompt of a background agent: identity statement, agent id, signal templates, result report
    template, task."""
    parts = [IDENTITY_STATEMENT]
    if agent_id:
        written = yaml_text(agent_id)
        parts.append(f"**Your Agent ID:** {agent_id}\nUse `agent_id: {written}` in every signal you emit.\n")
    templates = "\n\n".join(f"```yaml\n{template}\n```" for template in SIGNAL_TEMPLATES)
    parts.append(f"{_HOW_TO_SIGNAL}\n{templates}\n")
    parts.append(f"## RESULT REPORT\n\n{RESULT_INSTRUCTIONS}\n```markdown\n{RESULT_TEMPLATE}\n```\n")
    parts.append(f"## YOUR TASK\n{task.strip()}\n")
    return "\n".join(parts)


def yaml_text(value: str) -> str:
    """``value`` as a YAML value that reads back as this text: as it is where it does, else quoted (an id
    such as ``*star`` would be an alias, ``a #1`` a comment, ``1234`` a number)."""
    try:
        if yamlsafe.load(f"v: {value}\n") == {"v": value}:
            return value
    except ProtocolError:
        pass
    return orjson.dumps(value).decode()
