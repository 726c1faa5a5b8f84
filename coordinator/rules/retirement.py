"""Retirement, driven by TICK envelopes: a group that is done and quiet stops costing memory and start-up.

A group is retired at a tick when ``Policy.retire_after_seconds`` is not 0 and:

- it is settled (at least one agent, none active, no delegation waiting for a human): its status has
  been reported;
- nothing waits for a human: no escalation left undismissed (questions, blockers and pending
  delegations belong to active agents, so settled means there are none; a retry launched at the same
  tick is an active agent);
- none of its agents has been heard from (or resumed) for ``retire_after_seconds``.

Its state (agents, merged findings, the idempotency window) is then deleted in the commit of the tick's
batch, and a ``group_retired`` decision says so. The findings stream keeps every report, so
``replay --group`` still recomputes its merged view. An entry of the group that arrives later starts a
new group of the same id; that it could be a duplicate of one applied before is ruled out by the same
reasoning that bounds the idempotency window (duplicates arrive right after their original, not after
days of silence).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from bus.events import DecisionType
from coordinator.rules.step import Step

__all__ = ["retire_if_done"]


def retire_if_done(step: Step, now: datetime) -> None:
    """Retire the step's group if it is done and has been quiet long enough (see the module)."""
    after = step.policy.retire_after_seconds
    if not after:
        return
    state = step.state
    if not state.settled or state.escalations:
        return
    quiet_since = max(record.timeout_reference for record in state.agents.values())
    if now - quiet_since < timedelta(seconds=after):
        return
    step.replace(retired_at=now)
    verdict = state.status.value if state.status else "none"
    detail = f"retired: settled (status {verdict}), no agent heard from since {quiet_since.isoformat()}"
    step.decide(DecisionType.GROUP_RETIRED, step.envelope.agent_id, detail)
