"""An agent that waits for its blocking delegates lends its launcher slot to them (``--idle-file``).

Under ``--until-complete`` a launcher's adapter keeps running while its agent waits between two turns,
and so holds one of the launcher's ``--max-parallel`` slots. A parent that delegated work it waits for
(``independence: blocks_current_work``) would then hold the very slot its delegate needs: with one slot,
or a chain of such delegations, the delegate would never start. So while the agent waits between turns
for an answer to a blocking delegation request of its own, its adapter keeps a file that tells its
launcher the slot is free (:meth:`agents.launcher.Launcher.busy`); the parent resumes when its delegate
completes and frees the slot again.

Only that wait lends the slot (also while such a request waits for a human's approval): an agent waiting
for a human's answer or resolution keeps its slot, so ``--max-parallel`` still bounds how many agents a
round of answers resumes. A request counts as answered when the agent's directive says so: the
delegate's results (``DELEGATION_COMPLETED``) or a denial.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from bus.directives import DelegationCompleted, DelegationDenied
from bus.envelope import Envelope
from bus.signals import DelegateWork, Independence

__all__ = ["DelegateWait"]


class DelegateWait:
    """The agent's blocking delegation requests not answered yet, and the file that says it waits."""

    def __init__(self, path: Path | None, log: Callable[[str], None]) -> None:
        self.path = path
        self._log = log
        self._requests: set[str] = set()
        self._answered: set[str] = set()
        """A request printed again once answered is one the coordinator answers no more (it refuses it
        as received already): it must not lend the slot again."""

    def signalled(self, envelopes: Sequence[Envelope]) -> None:
        """What the agent printed: a blocking DELEGATE_WORK is a request it will wait for."""
        for envelope in envelopes:
            payload = envelope.payload
            if isinstance(payload, DelegateWork) and payload.independence is Independence.BLOCKS_CURRENT_WORK:
                request_id = payload.request_id(envelope.agent_id)
                if request_id not in self._answered:
                    self._requests.add(request_id)

    def directed(self, envelope: Envelope) -> None:
        """A directive delivered to the agent: the results of a delegate, or a denial, answer a request."""
        payload = envelope.payload
        if isinstance(payload, DelegationCompleted | DelegationDenied):
            self._requests.discard(payload.request_id)
            self._answered.add(payload.request_id)

    def between_turns(self, waiting: bool) -> None:
        """The agent's turn ended and it waits for a directive (``waiting``), or it does not (a turn starts,
        the adapter ends): the file exists while it waits for a delegate."""
        lend = waiting and bool(self._requests)
        if self.path is None:
            return
        try:
            if lend:
                self.path.touch()
            else:
                self.path.unlink(missing_ok=True)
        except OSError as exc:
            self._log(f"cannot {'create' if lend else 'remove'} {self.path}: {exc}")
