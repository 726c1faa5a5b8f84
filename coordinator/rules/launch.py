"""Starting a new agent: a launch request on the tasks stream and the agent's record in the group."""

from __future__ import annotations

from dataclasses import dataclass

from bus.directives import LaunchReason, LaunchRequest
from bus.events import DecisionType
from bus.signals import Priority
from coordinator.rules.outcome import Target
from coordinator.rules.step import Step
from coordinator.state import AgentRecord

__all__ = ["Launch", "launch"]


@dataclass(frozen=True)
class Launch:
    """What to start; ``parent`` is the agent the new one works for (none for a retried top-level agent)."""

    new_agent_id: str
    request_id: str
    reason: LaunchReason
    task: str
    parent: AgentRecord | None
    depth: int
    context: str | None = None
    priority: Priority = Priority.P1
    attempt: int = 1
    blocks_parent: bool = False
    retry_of: str | None = None
    name: str | None = None


def launch(step: Step, spec: Launch) -> AgentRecord:
    """Register the new agent and emit its launch request.

    The agent counts as running from now, so a launch that never starts times out. The request goes to
    the tasks stream with the new agent's id on the envelope.
    """
    parent_id = spec.parent.agent_id if spec.parent is not None else None
    request = LaunchRequest(
        request_id=spec.request_id,
        new_agent_id=spec.new_agent_id,
        parent_agent_id=parent_id,
        reason=spec.reason,
        task=spec.task,
        context=spec.context,
        priority=spec.priority,
        depth=spec.depth,
        attempt=spec.attempt,
    )
    record = step.put(
        AgentRecord(
            agent_id=spec.new_agent_id,
            name=spec.name,
            parent_agent_id=parent_id,
            depth=spec.depth,
            task=spec.task,
            registered_at=step.ts,
            last_seen=step.ts,
            attempt=spec.attempt,
            retry_of=spec.retry_of,
            request_id=spec.request_id,
            blocks_parent=spec.blocks_parent,
        )
    )
    step.emit(Target.TASKS, request, spec.new_agent_id)
    detail = f"{spec.reason.value} launch of {spec.new_agent_id} (attempt {spec.attempt}, depth {spec.depth})"
    step.decide(DecisionType.LAUNCH_REQUESTED, spec.new_agent_id, detail, request_id=spec.request_id)
    return record
