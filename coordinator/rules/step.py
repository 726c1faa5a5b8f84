"""The work of applying one envelope: the state as the rules change it, and what they emit.

A :class:`Step` lives only inside one call of :func:`~coordinator.rules.apply.apply`; the rules change it
freely, and the call turns it into an :class:`~coordinator.rules.outcome.Outcome`. A state the run did
not make is never mutated: every change replaces a model with an updated copy, in maps the
:class:`~coordinator.rules.run.Run` copied for itself; what the run made (its maps, the records it
counts entries for, and the group state of its last entry) it changes in place, since only the run's own
states hold them.

The models built here (decisions, updated records, and emitted envelopes through
:func:`bus.envelope.new_envelope`) are built without validating them again
(:mod:`coordinator.rules.trusted`): their values come from the validated input, state and policy.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, TypeVar

from bus.envelope import MAX_ENVELOPE_BYTES, Envelope, EnvelopeType, Kind, Payload
from bus.errors import BusError
from bus.events import AgentState, Decision, DecisionType
from coordinator.policy import Policy
from coordinator.rules.holds import held
from coordinator.rules.ids import emitted_id
from coordinator.rules.outcome import Emit, Outcome, Target
from coordinator.rules.run import Run
from coordinator.rules.trusted import change, construct, evolve
from coordinator.state import AgentRecord, FindingSlot, GroupState

__all__ = ["MAX_DETAIL", "SOURCE", "Rejected", "Step", "TooLarge"]

SOURCE: Final = "coordinator"
"""The ``source`` of every envelope the rules emit."""
MAX_DETAIL: Final = 2000
"""Decision details are summaries for people; longer text (an agent's whole signal) is cut here."""

P = TypeVar("P")


class Rejected(BusError):
    """Raised by a rule when the entry cannot be applied; :func:`apply` turns it into a rejected outcome."""


class TooLarge(Rejected):
    """An entry to emit would be over the envelope limit (see :meth:`Step.emit`); nothing was emitted."""


class Step:
    """The state being built for one envelope and the envelopes emitted so far.

    Changed agents and findings go into the run's own copies of the group's maps (made on the run's first
    change), each change logged so that :meth:`undo` takes back a step whose rule failed; other changed
    fields go into ``_changes``. :attr:`state` and :attr:`initial` build the group state after and before
    the step's changes when a rule asks for them, and :meth:`finish` builds the final one once.
    """

    __slots__ = (
        "_cause",
        "_changes",
        "_input",
        "_payload",
        "_state",
        "_undo",
        "agent_id",
        "alive",
        "at",
        "emits",
        "entry_group_id",
        "entry_id",
        "entry_type",
        "envelope",
        "floor",
        "group_id",
        "policy",
        "run",
        "superseded",
        "ts",
    )

    def __init__(
        self, state: GroupState, envelope: Envelope, policy: Policy, run: Run, arrived: datetime | None = None
    ) -> None:
        self._input: Final = state
        self.envelope: Final = envelope
        self.policy: Final = policy
        self.run: Final = run
        # The fields every entry's rules read, read here once: reading a field of a pydantic model costs
        # about ten plain attribute reads (its class's __getattr__ keeps CPython from caching the lookup).
        head, group = envelope.__dict__, state.__dict__
        self.entry_id: Final[str] = head["id"]
        self.entry_type: Final[EnvelopeType] = head["type"]
        self.entry_group_id: Final[str] = head["group_id"]
        self.agent_id: Final[str] = head["agent_id"]
        """The input's sender (for a human command, the agent it is addressed to)."""
        self.ts: Final[datetime] = head["ts"]
        """The timestamp of every envelope emitted in this step: the input's own."""
        self.group_id: Final[str] = group["group_id"]
        ticked = group["ticked_at"]
        if arrived is not None and (ticked is None or arrived > ticked):
            ticked = arrived
        self.floor: Final[datetime | None] = ticked
        """The earliest the input can have been sent, by the server's clock: the later of the ``arrived``
        time :func:`~coordinator.rules.apply.apply` was given and the group's last tick, which came before
        it in the stream."""
        self.at: Final[datetime] = ticked if ticked is not None and ticked > self.ts else self.ts
        """When the input was sent, for the rules' timeouts: its timestamp (its sender's clock), but never
        before :attr:`floor`. A sender whose clock is behind the server's does not make an agent look
        silent, also when its entries are applied long after they came (every coordinator was down);
        one ahead is brought back by the next tick (:mod:`coordinator.rules.timeouts`)."""
        self._payload: Final[Payload] = head["payload"]
        cause = self.entry_id
        if self.entry_group_id != self.group_id:  # a TICK, applied to every group of its shard: one id each
            cause = f"{cause}@{self.group_id}"
        self._cause: Final = cause
        """What the ids of the step's emitted envelopes derive from."""
        self.emits: list[Emit] = []
        self.superseded: tuple[tuple[str, tuple[str, ...]], ...] = ()
        """See :attr:`Outcome.superseded`."""
        self._changes: dict[str, Any] = {}
        self._state: GroupState | None = None
        """The last snapshot :attr:`state` built (None: build one; the input's maps may be the run's)."""
        self._undo: list[tuple[dict[str, Any], str, Any]] = []
        """(map, key, the value it had or _MISSING) for every change to the run's maps, in order."""
        self.alive = False
        """The input is a sign of life of its agent: counting it refreshes the agent's ``last_seen``."""

    @property
    def initial(self) -> GroupState:
        """The group state before this step's changes."""
        if not self._undo:
            return self._input
        maps: dict[str, Any] = {}
        for name, current in (("agents", self.run.agents), ("findings", self.run.findings)):
            if current is not None:
                before = dict(current)
                for changed, key, old in reversed(self._undo):
                    if changed is current:
                        _restore(before, key, old)
                maps[name] = before
        return evolve(self._input, **maps)

    @property
    def state(self) -> GroupState:
        """The group state as changed so far (a snapshot: the rules' later changes do not alter it)."""
        if self._state is None:
            changes = dict(self._changes)
            if self.run.agents is not None:
                changes["agents"] = dict(self.run.agents)
            if self.run.findings is not None:
                changes["findings"] = dict(self.run.findings)
            self._state = evolve(self._input, **changes) if changes else self._input
        return self._state

    def current(self, name: str) -> Any:
        """A field of the group state as changed so far (not ``agents`` or ``findings``), without the
        snapshot :attr:`state` builds, which copies the group's maps: for rules run on every finding."""
        changes = self._changes
        return changes[name] if name in changes else getattr(self._input, name)

    def payload(self, model: type[P]) -> P:
        """The input's payload, which the dispatch guarantees to be a ``model``."""
        payload = self._payload
        if not isinstance(payload, model):
            raise Rejected(f"payload of {self.entry_type.value} is not a {model.__name__}")
        return payload

    # -- agents and findings -------------------------------------------------------------------------

    def find(self, agent_id: str) -> AgentRecord | None:
        agents = self.run.agents
        return (agents if agents is not None else self._input.agents).get(agent_id)

    def agent(self, agent_id: str) -> AgentRecord:
        """A known agent; an unknown one rejects the entry."""
        record = self.find(agent_id)
        if record is None:
            raise Rejected(f"unknown agent {agent_id!r} in group {self.group_id!r}")
        return record

    def put(self, record: AgentRecord) -> AgentRecord:
        run = self.run
        if run.agents is None:
            run.agents = dict(self._input.agents)
        self._set(run.agents, record.agent_id, record)
        run.agents_touched.add(record.agent_id)
        return record

    def update(self, agent_id: str, **changes: Any) -> AgentRecord:
        """Replace fields of a known agent's record."""
        record = self.put(evolve(self.agent(agent_id), **changes))
        self.run.own[id(record)] = record
        return record

    def finding(self, key: str) -> FindingSlot | None:
        findings = self.run.findings
        return (findings if findings is not None else self._input.findings).get(key)

    def put_finding(self, key: str, slot: FindingSlot) -> None:
        run = self.run
        if run.findings is None:
            run.findings = dict(self._input.findings)
        self._set(run.findings, key, slot)
        run.findings_touched.add(key)

    def replace(self, **changes: Any) -> None:
        """Replace fields of the group state (agents and findings change through :meth:`put` and
        :meth:`put_finding`)."""
        if changes.keys() & {"agents", "findings"}:
            raise ValueError("agents and findings change one record at a time")
        self._changes.update(changes)
        self._state = None

    def undo(self) -> None:
        """Take back this step's changes to the run's maps (its rule failed)."""
        for changed, key, old in reversed(self._undo):
            _restore(changed, key, old)
        self._undo.clear()
        self._state = None

    def _set(self, changed: dict[str, Any], key: str, value: Any) -> None:
        self._undo.append((changed, key, changed.get(key, _MISSING)))
        changed[key] = value
        self._state = None

    # -- emitting -----------------------------------------------------------------------------------

    def emit(self, target: Target, payload: Payload, agent_id: str) -> None:
        emitted = emitted_id(self._cause, len(self.emits))
        emit = Emit(target, payload, agent_id, self.group_id, SOURCE, emitted, self.ts)
        if len(emit.data) > MAX_ENVELOPE_BYTES and (
            self.envelope.kind is Kind.HUMAN or target is Target.FINDINGS
        ):
            # Every reader would dead-letter it. A human's command is refused (it may be given shorter),
            # and so is a finding whose copy it is (a result's leaves that one finding out): the copy is
            # the finding's record, which `replay` and every reader of the stream must see as the merged
            # view does. Any other entry of an agent is applied all the same, its outcome kept, the one
            # entry dead-lettered where it is read.
            raise TooLarge(
                f"its {emit.type.value} for {agent_id!r} would be {len(emit.data)} bytes, over the "
                f"{MAX_ENVELOPE_BYTES} bytes an envelope may have"
            )
        self.emits.append(emit)

    def direct(self, agent_id: str, payload: Payload) -> str:
        """A directive into one agent's inbox; its envelope id."""
        self.emit(Target.INBOX, payload, agent_id)
        return self.emits[-1].envelope_id

    def supersede(self, agent_id: str, envelope_ids: tuple[str, ...]) -> None:
        """Have directives of the agent's inbox acknowledged unread (:attr:`Outcome.superseded`)."""
        if envelope_ids:
            self.superseded += ((agent_id, envelope_ids),)

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
            cause=self.entry_id,
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
        """Back to running after a directive; timeouts count again from now (the input's :attr:`at`).

        Unless something else still holds the agent: one directive answers one thing it waits on, and
        it may wait on several (questions, then a blocker; delegates). It is then in the state of what
        holds it, which the decision names.
        """
        self.update(agent_id, resumed_at=self.at, **changes)
        state = held(self.agent(agent_id), self.state) or AgentState.RUNNING
        if state is not AgentState.RUNNING:
            detail += f"; still {state.value}"
        self.transition(agent_id, state, decision, detail, request=request)

    def finish(self, rejected: str | None = None) -> Outcome:
        """The outcome of the step.

        The id is remembered (in the run) whether the entry was applied or rejected; an applied entry
        also counts for the group (with its time, but a tick's) and for the agent it names (for the status
        view).
        """
        changes, run = self._changes, self.run
        run.ids[self.entry_id] = None
        if rejected is None:
            before = self._input.__dict__
            changes["applied"] = changes.get("applied", before["applied"]) + 1
            if self.entry_type is not EnvelopeType.TICK:  # a tick's agent id is a coordinator's name
                last, at = changes.get("last_applied_at", before["last_applied_at"]), self.at
                if last is None or at > last:
                    changes["last_applied_at"] = at
                record = self.find(self.agent_id)
                if record is not None:
                    self._count(record, at)
        if run.agents is not None:
            changes["agents"] = run.agents
        if run.findings is not None:
            changes["findings"] = run.findings
        state = self._input
        if state is run.state:  # only the run holds it (the entry before made it): no need for a copy
            change(state, changes)
        else:
            state = run.state = evolve(state, **changes)
        outcome = Outcome(state, self.emits, rejected, run.agents_touched, run.findings_touched)
        # only when there are any: a keyword more on every entry's outcome cost a percent of the entry
        return outcome._replace(superseded=self.superseded) if self.superseded else outcome

    def _count(self, record: AgentRecord, at: datetime) -> None:
        """One more entry applied for ``record``'s agent, the input being the last (and a sign of life)."""
        fields = record.__dict__
        counted: dict[str, Any] = {"applied": fields["applied"] + 1, "last_applied_id": self.entry_id}
        if self.alive and at > fields["last_seen"]:
            counted["last_seen"] = at
        if id(record) in self.run.own:
            # No rule runs after this and only the run holds the record: no need for another copy.
            change(record, counted)
        else:
            record = self.put(evolve(record, **counted))
            self.run.own[id(record)] = record


_MISSING: Final = object()
"""The value of a key a map did not have (in the undo log)."""


def _restore(changed: dict[str, Any], key: str, old: Any) -> None:
    if old is _MISSING:
        changed.pop(key, None)
    else:
        changed[key] = old
