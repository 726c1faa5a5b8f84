"""How ``adapter watch`` runs a resume command: after the agent's turn, and never after it completed.

``adapter run`` starts the agent's turns itself, so it knows when one ends. ``adapter watch`` follows an
agent another program started: with ``--pid`` it knows the turn runs while that process does, and waits
for its end before resuming (two turns of one session at once would both act on it, and a turn that
completes the agent makes the resume one too many). Without ``--pid`` the command runs when the
directive comes, as nothing tells the adapter when a turn ends. Either way a directive that comes after
the agent completed starts nothing (:class:`~agents.delivery.AgentDone`), as with ``adapter run``. A
stop signal the adapter takes while the command runs is passed on to it (``stopping``, see
:class:`~agents.delivery_command.Stopping`); none starts after one.

The turns are counted (:class:`Turns`): with ``--pid``, ``--until-complete`` and a resume command, the
process's end ends a turn, not the watch, and :class:`~agents.watch.FileWatch` tells each turn's end
(the process's, then each resume command's) and heartbeats while one runs, as ``adapter run`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator

from agents.adapter import AgentBus
from agents.delivery import AgentDone, Directive, Runner
from agents.delivery_command import DeliveryFailed, Stopping, run_checked
from bus.embedded import pid_alive
from bus.envelope import deterministic_id
from bus.waits import wait_for

__all__ = ["Turns", "after_turn"]


class Turns:
    """The agent's turns ``adapter watch`` knows of: the ``--pid`` process's (none without one), then
    one per resume command it runs; and what the adapter said of their ends."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.begun = 0 if pid is None else 1
        """Turns begun so far: a resume command that ran between two looks at :meth:`running` still
        counts, so that its end is told."""
        self._commands = 0
        self._told = 0
        """:attr:`begun` when the last turn's end was told."""
        self.resumable = False
        """What the last AGENT_EXITED said: the adapter goes on resuming the agent."""
        self.unwatched = False
        """The watch of the agent's file has ended: no turn's end is told any more."""

    def running(self) -> bool:
        """Whether a turn runs: the ``--pid`` process, or a resume command."""
        return self._commands > 0 or (self.pid is not None and pid_alive(self.pid))

    def over(self) -> bool:
        """Whether a turn ended whose end was not told yet: none runs, and one began since the last end."""
        return self.begun > self._told and not self.running()

    def current(self) -> bool:
        """Whether a resume command is to wait: a turn runs (whether the file is watched or not: two turns
        of one session must not run at once), or, while the file is watched, its end was not told yet (the
        next turn starts after it, as with ``adapter run``). Without ``--pid`` no turn's end is known: none
        is waited for."""
        return self.pid is not None and (self.running() or (not self.unwatched and self.begun > self._told))

    @contextlib.contextmanager
    def command(self) -> Iterator[Callable[[], None]]:
        """While a resume command is run: what it calls once it started, a turn of the agent (one that
        could not start is none, and no end of it is told)."""
        self._commands += 1
        try:
            yield self._begin
        finally:
            self._commands -= 1

    def _begin(self) -> None:
        self.begun += 1

    async def ended(self, bus: AgentBus, source: str, read: int) -> None:
        """AGENT_EXITED for the end of a turn the watch goes on after, the file read to byte ``read``: it
        says the adapter resumes the agent with its directives, as ``adapter run --until-complete`` says.
        Its id is the turn's number and where the file was read to: an adapter restarted after the
        process's end was told, and nothing written since, says it again under the same id; and a resume
        command that wrote nothing still ends a turn of its own (under the id of the turn before, it would
        be dropped as a repeat). Told once published: the next resume command waits for that."""
        begun, self.resumable = self.begun, not bus.completed
        bus.log("the agent's turn ended: following its file and inbox until it completes")
        exit_id = deterministic_id(bus.agent_id, f"{source}#turn:{begun}", read)
        await bus.exited(source=source, exit_code=None, id=exit_id, resumable=self.resumable)
        self._told = begun

    async def stopped(self, bus: AgentBus, source: str) -> None:
        """The watch stops before the agent completed, after an AGENT_EXITED that said it would resume
        it: one more says nobody will (as ``adapter run`` says), so a directive for the agent is not left
        waiting for this adapter."""
        if self.resumable and not bus.completed:
            self.resumable = False
            await bus.exited(source=source, exit_code=None, resumable=False)


def after_turn(bus: AgentBus, turns: Turns, stop: asyncio.Event, poll_s: float, stopping: Stopping) -> Runner:
    """The runner of ``adapter watch``'s resume commands (see the module's docstring)."""

    async def resume(argv: list[str], directive: Directive) -> None:
        while turns.current() and not bus.completed:
            if await wait_for(stop, poll_s):
                raise DeliveryFailed(
                    f"the adapter stopped before the agent's turn (process {turns.pid}) ended"
                )
        if bus.completed:
            raise AgentDone()
        if stop.is_set():  # an idle stop, or a signal that came while the process ended
            raise DeliveryFailed("the adapter is stopping")
        with turns.command() as began:
            await run_checked(argv, bus.log, bus.warn, stopping, began)

    return resume
