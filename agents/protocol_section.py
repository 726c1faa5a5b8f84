"""The protocol section ``subagent-bus init`` writes into the agent's instructions file (``CLAUDE.md``,
``AGENTS.md``), between ``<!-- subagent-bus:start -->`` and ``<!-- subagent-bus:end -->``: protocol 1's
identity statement, the signal templates and the result report's template (:mod:`agents.identity`), the
MCP tools, how to wait for an answer (``wait_for_directive``, or ``listen`` from a shell), and how a Claude
Code session that launches background agents takes up their signals.
"""

from __future__ import annotations

from typing import Final

from agents.identity import IDENTITY_STATEMENT, RESULT_INSTRUCTIONS, RESULT_TEMPLATE, SIGNAL_TEMPLATES
from agents.init_merge import MARK_END, MARK_START

__all__ = ["protocol_section"]

_TOOLS: Final = """\
| MCP tool | instead of printing |
| --- | --- |
| `request_clarification` | `[CLARIFICATION_NEEDED]` |
| `stop_work` | `[STOP_WORK]` |
| `request_delegation` | `[DELEGATE_WORK]` |
| `report_completion` | `[COMPLETION_REPORT]` |
| `report_progress` | `[PROGRESS]` |
| `add_finding` | one finding (an issue at `file:line`) |
| `submit_result` | your `## <Agent> Result` report |
| `wait_for_directive` | (blocks until your parent's answer arrives and returns it) |
| `status` | (your state, open questions and progress as the coordinator sees them) |
"""

_WAITING: Final = """\
## Waiting for the answer

After CLARIFICATION_NEEDED or STOP_WORK (and DELEGATE_WORK with `independence: blocks_current_work`), do
not guess: wait for your parent's directive, then continue exactly as its resume prompt says.

- With the MCP tools: call `wait_for_directive` (`timeout_seconds` up to 3600); it returns the prompt, or
  says that none came yet (call it again).
- From a shell: run `subagent-bus listen --agent-id <your agent id> --group <your group> --timeout 3600`
  in the background and end your turn. It exits the moment the directive arrives and prints the resume
  prompt, and that exit wakes you. Exit status 0: the prompt was printed; 3: nothing yet, start it again;
  1: an error, on its stderr. `--agent-id` and `--group` default to `$SUBAGENT_BUS_AGENT_ID` and
  `$SUBAGENT_BUS_GROUP`.
"""

_PARENT: Final = """\
## When you launch background agents (Claude Code)

The `PostToolUse` hook in `.claude/settings.json` puts every background Task agent on the bus (its output
file is followed by `subagent-bus adapter watch`, in the group of this session). Their signals reach the
coordinator; see them with `subagent-bus status` and `subagent-bus inbox`, and act with
`subagent-bus answer`, `resolve`, `approve` and `deny`. The hook does not hand the coordinator's reply to
the agent: take it with `subagent-bus listen --agent-id <agentId> --group <group>` (`status` shows both;
the group is this session's id unless the hook names one) and resume the agent (Task `resume`) with the
prompt it prints.
"""


def protocol_section() -> str:
    """The marked section init writes into the agent's instructions file (ends with a newline).

    The same for every agent kind: one file may serve both (``CLAUDE.md`` a link to ``AGENTS.md``), and
    two sections for it would each be an edit of the other.
    """
    templates = "\n\n".join(f"```yaml\n{template}\n```" for template in SIGNAL_TEMPLATES)
    parts = [
        MARK_START,
        "<!-- Written by `subagent-bus init`. Edit outside these markers; "
        "`subagent-bus init --force` replaces what is inside. -->",
        "# Subagent communication protocol (subagent-bus)\n",
        "This applies when you run as a background subagent: your prompt starts with the execution "
        "context below, or `SUBAGENT_BUS_AGENT_ID` is set in your environment (your agent id; "
        "`SUBAGENT_BUS_GROUP` is your task group).\n",
        IDENTITY_STATEMENT,
        "## Signalling your parent\n",
        "Use the tools of the `subagent-bus` MCP server when you have them: each publishes the same "
        "signal as the block it replaces, validated before it is sent.\n",
        _TOOLS,
        "Without them, print each signal as a block in exactly this form: the opening tag alone on its "
        "line, the YAML fields, the closing tag alone on its line, with your real agent id and an "
        "ISO-8601 timestamp with a time zone (never the <placeholders>).\n",
        templates + "\n",
        "## Your result report\n",
        RESULT_INSTRUCTIONS
        + "With the MCP tools, pass the report to `submit_result` instead of printing it.\n",
        f"```markdown\n{RESULT_TEMPLATE}\n```\n",
        _WAITING,
        _PARENT,
        MARK_END,
    ]
    return "\n".join(parts) + "\n"
