"""Retirement, driven by TICK envelopes: a group that is done and quiet stops costing memory and start-up.

With ``Policy.retire_after_seconds`` set (0, the default, never retires), a tick retires a group when:

- no agent of it is active (running, waiting for an answer, a resolution or a delegate; agents that
  only send findings are never active), and no delegation request waits for a human;
- nothing else waits for a human either: no escalation left undismissed, no merged finding whose agents
  disagree on its severity;
- nothing was applied to it for ``retire_after_seconds``: no signal, result, finding, heartbeat or human
  command (ticks, and entries the rules rejected, do not count).

Its state (agents, merged findings, the idempotency window) is then deleted in the commit of the tick's
batch, a tombstone of it kept (:mod:`coordinator.tombstones`, which decides what a later entry of it does),
and a ``group_retired`` decision says so. The findings stream keeps every report, so ``replay --group``
still recomputes its merged view while the stream is not trimmed.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from bus.events import DecisionType
from coordinator.rules.step import Step
from coordinator.state import DelegationStatus

__all__ = ["retire_if_done"]


def retire_if_done(step: Step, now: datetime) -> None:
    """Retire the step's group if it is done and has been quiet long enough (see the module)."""
    after = step.policy.retire_after_seconds
    if not after:
        return
    state = step.state
    if state.active_count or state.escalations or state.severity_conflicts:
        return
    if any(d.status is DelegationStatus.PENDING_HUMAN for d in state.delegations.values()):
        return
    quiet_since = state.last_applied_at
    if quiet_since is not None and now - quiet_since < timedelta(seconds=after):
        return
    step.replace(retired_at=now)
    verdict = state.status.value if state.status else "none"
    since = quiet_since.isoformat() if quiet_since else "ever"
    detail = f"retired: status {verdict}, {len(state.agents)} agent(s), nothing applied since {since}"
    step.decide(DecisionType.GROUP_RETIRED, step.envelope.agent_id, detail)
