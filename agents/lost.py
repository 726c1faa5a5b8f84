"""What the parent is told when a signal the agent printed cannot reach it, or when the agent's program
says that its turn failed.

A CLARIFICATION_NEEDED, STOP_WORK or DELEGATE_WORK the agent waits on, or the completion it ends with
(a COMPLETION_REPORT or a result report), that cannot be read or is too large for an envelope would
leave the parent seeing a running agent that in fact waits for a reply, or has finished. In its place
the adapter publishes a STOP_WORK error, under the envelope id the signal would have had: the parent
sees a blocker in ``inbox``, and resolving it with what the agent needs (ask it to send the signal
again, corrected, say) resumes the agent; a recovery retries or skips its work. An agent that completes
with that blocker open (its COMPLETION_REPORT after a report that could not be read) leaves it to the
coordinator as an unresolved blocker, which has its group reviewed. A progress report that cannot be
read is only logged: nothing waits on it.

The other way round, a directive of the coordinator that the adapter cannot hand to its agent (its
resume command cannot start, say) is dead-lettered after the adapter's attempts, and the agent would be
left waiting for it, or ended, while the parent sees it running: the adapter then publishes a STOP_WORK
error saying so (:func:`undelivered`).

An agent whose program says in its output that the turn failed (Codex CLI's ``turn.failed``, a Claude Code
result that is an error or an entry flagged as an API error: :class:`~agents.items.TurnFailedItem`)
prints no signal of its own, and may exit 0: the adapter publishes a STOP_WORK error with what the
program said (:func:`failed_turn`), as it does for an agent that exits with an error status
(:mod:`agents.process`).
"""

from __future__ import annotations

from typing import Final

from bus.envelope import EnvelopeType
from bus.signals import BlockerType, StopReason, StopWork

__all__ = ["AWAITED", "RECOVERY", "failed_turn", "lost_signal", "undelivered"]

AWAITED: Final = frozenset(
    {
        EnvelopeType.CLARIFICATION_NEEDED,
        EnvelopeType.STOP_WORK,
        EnvelopeType.DELEGATE_WORK,
        EnvelopeType.COMPLETION_REPORT,
        EnvelopeType.RESULT,
    }
)
"""What the agent waits on, or ends with, once printed."""

_ENDS: Final = frozenset({EnvelopeType.COMPLETION_REPORT, EnvelopeType.RESULT})
"""What the agent ends with: most often it has finished by the time its loss is read."""
RECOVERY: Final = (
    "Potential fixes:\n"
    "1. Retry from the last checkpoint\n"
    "2. Skip the failing step and continue\n"
    "3. Delegate the remaining work to a new agent"
)
"""The recoveries of an agent that failed (``error_recovery``)."""


def lost_signal(agent_id: str, type_: EnvelopeType, where: str, why: str) -> StopWork:
    """The STOP_WORK error published in place of the agent's ``type_`` (at ``where`` in its output)
    that cannot reach the parent for the reason ``why``."""
    what = "result report" if type_ is EnvelopeType.RESULT else type_.value
    if type_ in _ENDS:
        then = (
            "Its outcome is not recorded. If the agent still runs, resolve this with what it needs (for "
            f"example, ask it to print the {what} again, corrected); if it has finished, nothing resumes "
            "it: read its output, and run it again if its work is needed."
        )
    else:
        then = (
            f"The agent waits for a reply: resolve this with what it needs (for example, ask it to send "
            f"the {what} again, corrected), or choose a recovery."
        )
    return StopWork(
        agent_id=agent_id,
        stop_reason=StopReason.ERROR,
        blocker_type=BlockerType.ERROR,
        details=f"The agent printed a {what} ({where}) that did not reach the coordinator: {why}. {then}",
    )


def undelivered(agent_id: str, what: str, directive_id: str, how: str, why: str) -> StopWork:
    """The STOP_WORK error published when the coordinator's ``what`` (directive ``directive_id``) was
    given up on for the reason ``why``: not handed to the agent by ``how``, or not known to be (an
    attempt cut short may have handed it)."""
    return StopWork(
        agent_id=agent_id,
        stop_reason=StopReason.ERROR,
        blocker_type=BlockerType.ERROR,
        details=(
            f"The coordinator's {what} (directive {directive_id}) was given up on ({how}): {why}. It "
            "went to the dead letters (`subagent-bus tail --stream dead`), and the agent may not have "
            "got it: it may wait for it, or have ended. Resolve this with what the agent needs (the "
            "same answer again, shorter, say), or choose a recovery."
        ),
    )


def failed_turn(agent_id: str, message: str) -> StopWork:
    """The STOP_WORK error published for a turn that the agent's program said failed (``message``)."""
    return StopWork(
        agent_id=agent_id,
        stop_reason=StopReason.ERROR,
        blocker_type=BlockerType.ERROR,
        details=f"The agent's turn failed: {message}",
        error_recovery=RECOVERY,
    )
