"""The work of applying one envelope: the state as the rules change it, and what they emit.

A :class:`Step` lives only inside one call of :func:`~coordinator.rules.apply.apply`; the rules change it
freely, and the call turns it into an :class:`~coordinator.rules.outcome.Outcome`. The input state is
never mutated: every change replaces a model with an updated copy. The one exception is counting an
entry for an agent whose record the :class:`~coordinator.rules.run.Run` made itself, which only the
run's own states hold.

The models built here (decisions, updated records, and emitted envelopes through
:func:`bus.envelope.new_envelope`) are built without validating them again
(:mod:`coordinator.rules.trusted`): their values come from the validated input, state and policy.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, TypeVar

from bus.envelope import Envelope, Payload, new_envelope
from bus.errors import BusError
from bus.events import AgentState, Decision, DecisionType
from coordinator.policy import Policy
from coordinator.rules.ids import emitted_id
from coordinator.rules.outcome import Emit, Outcome, Target
from coordinator.rules.run import Run
from coordinator.rules.trusted import construct, evolve
from coordinator.state import AgentRecord, FindingSlot, GroupState

__all__ = ["MAX_DETAIL", "SOURCE", "Rejected", "Step"]

SOURCE: Final = "coordinator"
"""The ``source`` of every envelope the rules emit."""
MAX_DETAIL: Final = 2000
"""Decision details are summaries for people; longer text (an agent's whole signal) is cut here."""

P = TypeVar("P")


class Rejected(BusError):
    """Raised by a rule when the entry cannot be applied; :func:`apply` turns it into a rejected outcome."""


class Step:
    """The state being built for one envelope and the envelopes emitted so far.

    Changed agents and findings go into working copies of the input's dicts (made on the first change),
    other changed fields into ``_changes``; :attr:`state` builds the group state they describe when a rule
    asks for it, and :meth:`finish` builds the final one once.
    """

    __slots__ = (
        "_agents",
        "_changes",
        "_findings",
        "_state",
        "alive",
        "emits",
        "envelope",
        "initial",
        "policy",
        "run",
    )

    def __init__(self, state: GroupState, envelope: Envelope, policy: Policy, run: Run) -> None:
        self.initial: Final = state
        self.envelope: Final = envelope
        self.policy: Final = policy
        self.run: Final = run
        self.emits: list[Emit] = []
        self._agents: dict[str, AgentRecord] | None = None
        self._findings: dict[str, FindingSlot] | None = None
        self._changes: dict[str, Any] = {}
        self._state: GroupState | None = state
        self.alive = False
        """The input is a sign of life of its agent: counting it refreshes the agent's ``last_seen``."""

    @property
    def ts(self) -> datetime:
        """The timestamp of every envelope emitted in this step: the input's own."""
        return self.envelope.ts

    @property
    def group_id(self) -> str:
        return self.initial.group_id

    @property
    def state(self) -> GroupState:
        """The group state as changed so far (a snapshot: the rules' later changes do not alter it)."""
        if self._state is None:
            changes = dict(self._changes)
            if self._agents is not None:
                changes["agents"] = dict(self._agents)
            if self._findings is not None:
                changes["findings"] = dict(self._findings)
            self._state = evolve(self.initial, **changes) if changes else self.initial
        return self._state

    def payload(self, model: type[P]) -> P:
        """The input's payload, which the dispatch guarantees to be a ``model``."""
        payload = self.envelope.payload
        if not isinstance(payload, model):
            raise Rejected(f"payload of {self.envelope.type.value} is not a {model.__name__}")
        return payload

    # -- agents and findings -------------------------------------------------------------------------

    def find(self, agent_id: str) -> AgentRecord | None:
        agents = self._agents if self._agents is not None else self.initial.agents
        return agents.get(agent_id)

    def agent(self, agent_id: str) -> AgentRecord:
        """A known agent; an unknown one rejects the entry."""
        record = self.find(agent_id)
        if record is None:
            raise Rejected(f"unknown agent {agent_id!r} in group {self.group_id!r}")
        return record

    def put(self, record: AgentRecord) -> AgentRecord:
        if self._agents is None:
            self._agents = dict(self.initial.agents)
        self._agents[record.agent_id] = record
        if self.run.agents_touched is not None:
            self.run.agents_touched.add(record.agent_id)
        self._state = None
        return record

    def update(self, agent_id: str, **changes: Any) -> AgentRecord:
        """Replace fields of a known agent's record."""
        record = self.put(evolve(self.agent(agent_id), **changes))
        self.run.own[id(record)] = record
        return record

    def finding(self, key: str) -> FindingSlot | None:
        findings = self._findings if self._findings is not None else self.initial.findings
        return findings.get(key)

    def put_finding(self, key: str, slot: FindingSlot) -> None:
        if self._findings is None:
            self._findings = dict(self.initial.findings)
        self._findings[key] = slot
        if self.run.findings_touched is not None:
            self.run.findings_touched.add(key)
        self._state = None

    def replace(self, **changes: Any) -> None:
        """Replace fields of the group state."""
        if "agents" in changes:
            self._agents = dict(changes.pop("agents"))
            self.run.agents_touched = None
        if "findings" in changes:
            self._findings = dict(changes.pop("findings"))
            self.run.findings_touched = None
        self._changes.update(changes)
        self._state = None

    # -- emitting -----------------------------------------------------------------------------------

    def emit(self, target: Target, payload: Payload, agent_id: str) -> Envelope:
        envelope = new_envelope(
            payload,
            agent_id=agent_id,
            group_id=self.initial.group_id,
            source=SOURCE,
            id=emitted_id(self.envelope.id, len(self.emits)),
            ts=self.envelope.ts,
        )
        self.emits.append(Emit(target, envelope))
        return envelope

    def direct(self, agent_id: str, payload: Payload) -> Envelope:
        """A directive into one agent's inbox."""
        return self.emit(Target.INBOX, payload, agent_id)

    def decide(
        self,
        decision: DecisionType,
        agent_id: str,
        detail: str = "",
        *,
        request_id: str | None = None,
        state: AgentState | None = None,
    ) -> None:
        """A decision event; ``state`` defaults to the agent's state after the change."""
        if state is None:
            record = self.find(agent_id)
            state = record.state if record is not None else None
        if len(detail) > MAX_DETAIL:
            detail = detail[: MAX_DETAIL - 1] + "…"
        payload = construct(
            Decision,
            decision=decision,
            detail=detail,
            cause=self.envelope.id,
            request_id=request_id,
            state=state,
        )
        self.emit(Target.EVENTS, payload, agent_id)

    def transition(
        self,
        agent_id: str,
        state: AgentState,
        decision: DecisionType,
        detail: str,
        *,
        request: str | None = None,
        **changes: Any,
    ) -> None:
        """Move an agent to ``state`` (with other record changes) and record the decision.

        ``request`` is the delegation request the decision is about, if any.
        """
        self.update(agent_id, state=state, **changes)
        self.decide(decision, agent_id, detail, request_id=request, state=state)

    def resume(
        self,
        agent_id: str,
        decision: DecisionType,
        detail: str,
        *,
        request: str | None = None,
        **changes: Any,
    ) -> None:
        """Back to running after a directive; timeouts count again from now (the input's timestamp)."""
        self.transition(
            agent_id, AgentState.RUNNING, decision, detail, request=request, resumed_at=self.ts, **changes
        )

    def finish(self, rejected: str | None = None) -> Outcome:
        """The outcome of the step.

        The id is remembered (in the run) whether the entry was applied or rejected; an applied entry
        also counts for the group and for the agent it names (for the status view).
        """
        initial, changes, envelope, run = self.initial, self._changes, self.envelope, self.run
        run.ids[envelope.id] = None
        if rejected is None:
            changes["applied"] = changes.get("applied", initial.applied) + 1
            record = self.find(envelope.agent_id)
            if record is not None:
                self._count(record)
        if self._agents is not None:
            changes["agents"] = self._agents
        if self._findings is not None:
            changes["findings"] = self._findings
        return Outcome(
            evolve(initial, **changes), self.emits, rejected, run.agents_touched, run.findings_touched
        )

    def _count(self, record: AgentRecord) -> None:
        """One more entry applied for ``record``'s agent, the input being the last (and a sign of life)."""
        envelope = self.envelope
        counted: dict[str, Any] = {"applied": record.applied + 1, "last_applied_id": envelope.id}
        if self.alive and envelope.ts > record.last_seen:
            counted["last_seen"] = envelope.ts
        if id(record) in self.run.own:
            # No rule runs after this and only the run holds the record: no need for another copy.
            record.__dict__.update(counted)
            record.__pydantic_fields_set__.update(counted)
        else:
            record = self.put(evolve(record, **counted))
            self.run.own[id(record)] = record
