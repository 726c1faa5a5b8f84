"""How ``adapter watch`` runs a resume command: after the agent's turn, and never after it completed.

``adapter run`` starts the agent's turns itself, so it knows when one ends. ``adapter watch`` follows an
agent another program started: with ``--pid`` it knows the turn runs while that process does, and waits
for its end before resuming (two turns of one session at once would both act on it, and a turn that
completes the agent makes the resume one too many). Without ``--pid`` the command runs when the
directive comes, as nothing tells the adapter when a turn ends. Either way a directive that comes after
the agent completed starts nothing (:class:`~agents.delivery.AgentDone`), as with ``adapter run``. A
stop signal the adapter takes while the command runs is passed on to it (``stopping``, see
:class:`~agents.delivery_command.Stopping`); none starts after one.
"""

from __future__ import annotations

import asyncio

from agents.adapter import AgentBus
from agents.delivery import AgentDone, Directive, Runner
from agents.delivery_command import DeliveryFailed, Stopping, run_checked
from bus.embedded import pid_alive
from bus.waits import wait_for

__all__ = ["after_turn"]


def after_turn(
    bus: AgentBus, pid: int | None, stop: asyncio.Event, poll_s: float, stopping: Stopping
) -> Runner:
    """The runner of ``adapter watch``'s resume commands (see the module's docstring)."""

    async def resume(argv: list[str], directive: Directive) -> None:
        while pid is not None and pid_alive(pid):
            if await wait_for(stop, poll_s):
                raise DeliveryFailed(f"the adapter stopped while process {pid} (the agent's turn) still ran")
        if bus.completed:
            raise AgentDone()
        await run_checked(argv, bus.log, bus.warn, stopping)

    return resume
