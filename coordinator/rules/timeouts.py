"""Timeouts, driven by TICK envelopes: the rules never read a clock, ``Tick.now`` is the time.

A ``running`` agent silent for longer than ``heartbeat_timeout_seconds`` becomes ``timed_out``; a
``running`` or ``timed_out`` agent silent for longer than ``lost_timeout_seconds`` becomes ``lost``, which
is handled as a failure (retried once, then escalated). Silence counts from the agent's last envelope or
its last resume, whichever is later. An agent launched in a gap of the group's ticks longer than
``lost_timeout_seconds`` (no coordinator ran) and never heard from is not lost at the tick after it: its
launch request, caused by an entry that may have waited that long, may have been written expired, and is
written again (:func:`coordinator.rules.launch.reissue`); silence then counts from that tick. So is the
resume launch request of an agent an entry of that time relaunched, and not heard from since
(:attr:`~coordinator.state.AgentRecord.relaunch`, which every tick clears). Agents
waiting for a human or a delegate (``awaiting_clarification``, ``blocked``, ``delegating``) do not time
out: their silence is expected, and the wait is on someone else.
Nor do senders of nothing but findings (scripts, see :attr:`AgentRecord.watched`). A tick also retires a
group that is done and quiet (:mod:`coordinator.rules.retirement`).

Agents' timestamps come from their adapters' clocks (a human command's from its machine's), ticks from
the Redis server's (:class:`coordinator.service.Coordinator`), and those differ. So every time the rules
compare is brought to the ticks' clock (the group remembers its last tick's ``now``,
:attr:`GroupState.ticked_at`):

- an entry counts as sent no earlier than when it was added to the stream (its id's time, the server's
  clock) nor than the group's last tick, which came before it there (:attr:`Step.at`; a new group starts
  with its shard's last tick, see :class:`coordinator.batch.Batch`): an adapter or a human whose clock is
  behind does not make an agent look silent, also when its entries are applied long after they came;
- a tick brings back every time later than its ``now`` (an agent's last sign of life or resume, the
  group's last applied entry) to that ``now``: a sender's clock ahead, a timestamp of the year 9999, or
  a tick older than the one before it (a server's clock set back, a tick a publisher stamped), puts
  nothing off for longer than a tick.

So silence is measured in the ticks' clock, at most a tick interval off, whatever the senders' clocks.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from bus.envelope import EnvelopeType
from bus.events import AgentState, DecisionType, Tick
from bus.results import ResultStatus
from coordinator.rules.aggregation import finish
from coordinator.rules.launch import reissue
from coordinator.rules.retirement import retire_if_done
from coordinator.rules.step import Step
from coordinator.state import AgentRecord, Completion, Relaunch

__all__ = ["on_tick"]

_TIMED = frozenset({AgentState.RUNNING, AgentState.TIMED_OUT})
"""The states that time out."""


def on_tick(step: Step) -> None:
    now = step.payload(Tick).now
    heartbeat = timedelta(seconds=step.policy.heartbeat_timeout_seconds)
    lost = timedelta(seconds=step.policy.lost_timeout_seconds)
    previous = step.current("ticked_at")
    step.replace(ticked_at=now)
    # Ticks stop only while no coordinator runs. After a gap longer than a launch request lives, a request
    # caused by an entry of that time may have been written expired (its expiry counts from the entry).
    gap = previous is None or now - previous > lost
    last_applied = step.current("last_applied_at")
    if last_applied is not None and last_applied > now:
        step.replace(last_applied_at=now)
    for agent_id in sorted(step.state.agents):  # not the map's order, which a reload may change
        record = _rebased(step, step.agent(agent_id), now)
        relaunch = record.relaunch
        if relaunch is not None:  # an entry resumed it since the last tick: this tick decides on it, once
            record = step.update(agent_id, relaunch=None)
        if record.state not in _TIMED or not record.watched:
            # No resume request to write again here: a relaunch is of an agent its directive leaves
            # running (deliver holds a directive while something else holds the agent, for the relaunch
            # the last release causes; after_exit relaunches a running one), and only entries that count
            # as hearing from it can hold it again.
            continue
        silent = now - record.timeout_reference
        if silent > lost and gap and _launched_unheard(record, relaunch, previous):
            reissue(step, record, relaunch, f"silent for {_seconds(silent)}s")
        elif silent > lost:
            _lose(step, record, silent)
        elif silent > heartbeat and record.state is AgentState.RUNNING:
            detail = f"silent for {_seconds(silent)}s (timeout {_seconds(heartbeat)}s)"
            step.transition(agent_id, AgentState.TIMED_OUT, DecisionType.TIMED_OUT, detail)
    retire_if_done(step, now)


def _launched_unheard(record: AgentRecord, relaunch: Relaunch | None, previous: datetime | None) -> bool:
    """Whether the rules launched the agent after the group's ``previous`` tick, or an entry since it
    resumed it (``relaunch``), and nothing of it (or for it) came since."""
    if record.request_id is None:
        return False
    if relaunch is not None:
        return record.applied == relaunch.applied
    return record.applied == 0 and (previous is None or record.registered_at >= previous)


def _rebased(step: Step, record: AgentRecord, now: datetime) -> AgentRecord:
    """The record with no time later than the tick's ``now`` (see the module)."""
    changes: dict[str, datetime] = {}
    if record.last_seen > now:
        changes["last_seen"] = now
    if record.resumed_at is not None and record.resumed_at > now:
        changes["resumed_at"] = now
    return step.update(record.agent_id, **changes) if changes else record


def _lose(step: Step, record: AgentRecord, silent: timedelta) -> None:
    completion = Completion(
        status=ResultStatus.FAILED,
        summary=f"lost: silent for {_seconds(silent)}s (limit {_seconds(step.policy.lost_timeout_seconds)}s)",
        source=EnvelopeType.TICK,
        envelope_id=step.envelope.id,
    )
    finish(step, record.agent_id, completion, decision=DecisionType.LOST, state=AgentState.LOST)


def _seconds(span: timedelta | float) -> str:
    """``8.8`` (not 8.77085), ``120`` (not 120.0), ``27867512.3`` (not 2.78675e+07)."""
    seconds = span.total_seconds() if isinstance(span, timedelta) else span
    return f"{seconds:.1f}".removesuffix(".0")
