"""The human-readable views: `status [--watch]` (one block per group, with progress bars) and `inbox`.

Every item is one line: ids and texts are what agents sent, and a newline or another control character in
them is shown escaped (ids) or as a space (texts) rather than breaking the table; ids in the suggested
commands are shell-quoted so that they can be pasted as they are.
"""

from __future__ import annotations

import re
import shlex

from bus.directives import RecoveryOption
from bus.display import one_line
from coordinator.rules import GroupSummary
from coordinator.rules.summary import AgentSummary

__all__ = ["bar", "inbox_lines", "render"]

_WIDTH = 20
_SPACES = re.compile(r"\s+")


def _text(text: str) -> str:
    """A text as one line: runs of white space (newlines too) become one space, other controls escaped."""
    return one_line(_SPACES.sub(" ", text).strip())


def _arg(text: str) -> str:
    """An id as a shell argument; one with control characters in bash's ``$'...'`` quoting."""
    if one_line(text) == text:
        return shlex.quote(text)
    escaped = text.replace("\\", "\\\\").replace("'", "\\'")
    return f"$'{one_line(escaped)}'"


def bar(percent: float | None, width: int = _WIDTH) -> str:
    """``[#########...........]  45%`` (blank when the agent never reported progress)."""
    if percent is None:
        return " " * (width + 7)
    filled = round(max(0.0, min(100.0, percent)) / 100 * width)
    return f"[{'#' * filled}{'.' * (width - filled)}] {percent:3.0f}%"


def _agent(agent: AgentSummary) -> str:
    status = f" [{agent.status.value}]" if agent.status else ""
    flags = f"  violations: {_text(', '.join(agent.violations))}" if agent.violations else ""
    message = f"  {_text(agent.progress_message)}" if agent.progress_message else ""
    return (
        f"  {one_line(agent.agent_id):28} {agent.state.value:22} {bar(agent.percent)}{status}"
        f"  applied {agent.applied} (last {one_line(agent.last_applied_id or '-')}){flags}{message}"
    )


def render(summary: GroupSummary) -> list[str]:
    """The lines describing one group."""
    p = summary.progress
    verdict = f", verdict {summary.status.value}" if summary.status else ""
    lines = [
        f"group {one_line(summary.group_id)}: {p.completed}/{p.total} completed, {p.failed} failed, "
        f"{p.active} active{verdict}; {summary.findings} merged findings"
    ]
    lines += [_agent(agent) for agent in summary.agents]
    lines += [
        f"  ? {one_line(q.agent_id)} {one_line(q.question_id)}: {_text(q.text)}"
        for q in summary.open_questions
        if not q.answered
    ]
    lines += [
        f"  ! {one_line(b.agent_id)} blocked ({one_line(b.blocker_type)}): {_text(b.details)}"
        for b in summary.blockers
    ]
    lines += [
        f"  > delegation {one_line(d.request_id)} from {one_line(d.requester_id)} ({d.priority.value}) awaits approval"
        for d in summary.pending_delegations
    ]
    lines += [f"  ^ escalated {one_line(e.agent_id)}: {_text(e.reason)}" for e in summary.escalations]
    return lines


def inbox_lines(summaries: list[GroupSummary]) -> list[str]:
    """What waits for a human, each item with the command that acts on it."""
    lines: list[str] = []
    for q in (q for s in summaries for q in s.open_questions if not q.answered):
        lines.append(f"question  {one_line(q.agent_id)} {one_line(q.question_id)}: {_text(q.text)}")
        lines.append(f'          answer: subagent-bus answer {_arg(q.agent_id)} {_arg(q.question_id)}="..."')
    for b in (b for s in summaries for b in s.blockers):
        lines.append(f"blocker   {one_line(b.agent_id)} ({one_line(b.blocker_type)}): {_text(b.details)}")
        lines.append(f'          resolve: subagent-bus resolve {_arg(b.agent_id)} --resolution "..."')
        if "error" in (b.stop_reason, b.blocker_type):  # seed 003's recovery patterns apply
            options = "|".join(o.value for o in RecoveryOption)
            lines.append(f"          or recover: subagent-bus recover {_arg(b.agent_id)} --option {options}")
    for d in (d for s in summaries for d in s.pending_delegations):
        request = _arg(d.request_id)
        lines.append(
            f"delegate  {one_line(d.request_id)} from {one_line(d.requester_id)} ({d.priority.value}): {_text(d.task)[:80]}"
        )
        lines.append(f"          subagent-bus approve {request}  |  subagent-bus deny {request} --reason ...")
    lines += [
        f"escalated {one_line(e.agent_id)}: {_text(e.reason)}" for s in summaries for e in s.escalations
    ]
    return lines or ["nothing waits for a human"]
