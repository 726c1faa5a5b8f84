"""The human-readable status view: one block per group, with progress bars, for `status [--watch]`."""

from __future__ import annotations

from coordinator.rules import GroupSummary
from coordinator.rules.summary import AgentSummary

__all__ = ["bar", "render"]

_WIDTH = 20


def bar(percent: float | None, width: int = _WIDTH) -> str:
    """``[#########...........]  45%`` (blank when the agent never reported progress)."""
    if percent is None:
        return " " * (width + 7)
    filled = round(max(0.0, min(100.0, percent)) / 100 * width)
    return f"[{'#' * filled}{'.' * (width - filled)}] {percent:3.0f}%"


def _agent(agent: AgentSummary) -> str:
    status = f" [{agent.status.value}]" if agent.status else ""
    flags = f"  violations: {', '.join(agent.violations)}" if agent.violations else ""
    message = f"  {agent.progress_message}" if agent.progress_message else ""
    return (
        f"  {agent.agent_id:28} {agent.state.value:22} {bar(agent.percent)}{status}"
        f"  applied {agent.applied} (last {agent.last_applied_id or '-'}){flags}{message}"
    )


def render(summary: GroupSummary) -> list[str]:
    """The lines describing one group."""
    p = summary.progress
    verdict = f", verdict {summary.status.value}" if summary.status else ""
    lines = [
        f"group {summary.group_id}: {p.completed}/{p.total} completed, {p.failed} failed, "
        f"{p.active} active{verdict}; {summary.findings} merged findings"
    ]
    lines += [_agent(agent) for agent in summary.agents]
    lines += [f"  ? {q.agent_id} {q.question_id}: {q.text}" for q in summary.open_questions if not q.answered]
    lines += [f"  ! {b.agent_id} blocked ({b.blocker_type}): {b.details.strip()}" for b in summary.blockers]
    lines += [
        f"  > delegation {d.request_id} from {d.requester_id} ({d.priority.value}) awaits approval"
        for d in summary.pending_delegations
    ]
    lines += [f"  ^ escalated {e.agent_id}: {e.reason}" for e in summary.escalations]
    return lines
