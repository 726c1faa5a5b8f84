"""A run: what :func:`~coordinator.rules.apply.apply` keeps between the entries of one group applied in a
row (a batch), so that each entry does not pay again for what the run can do once."""

from __future__ import annotations

from coordinator.state import AgentRecord, FindingSlot, GroupState

__all__ = ["Run"]


class Run:
    """The ids a run applied and the records it made.

    - ``ids``: the entries applied (or rejected) so far, in order, which are not yet in the state's
      window. An entry is a duplicate when its id is in either; the caller adds them to the window at
      once (:meth:`~coordinator.window.IdWindow.extend`), which costs about what adding one id does.
    - ``own``: the agent records the run made (by id), which only the run's states hold: counting an
      entry for such a record changes it in place instead of copying it again. Records of the state the
      run started from are never changed.
    - ``agents`` / ``findings``: the run's own copies of the group's maps, made on its first change to
      each and changed in place from then on (a step copies nothing, however many findings the group
      has); None until then.
    - ``agents_touched`` / ``findings_touched``: the ids of the records the run may have replaced, so
      that storing the result compares only those.
    - ``state``: the last group state the run made, which only the run holds until it ends: the next
      entry's changes go into it in place instead of into another copy.
    """

    __slots__ = ("agents", "agents_touched", "findings", "findings_touched", "ids", "own", "state")

    def __init__(self) -> None:
        self.ids: dict[str, None] = {}
        self.own: dict[int, AgentRecord] = {}
        self.agents: dict[str, AgentRecord] | None = None
        self.findings: dict[str, FindingSlot] | None = None
        self.agents_touched: set[str] = set()
        self.findings_touched: set[str] = set()
        self.state: GroupState | None = None
