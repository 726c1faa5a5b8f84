"""Deterministic ids of everything the rules create.

Nothing here reads a clock or a random source: the ids of emitted envelopes derive from the id of the
envelope being applied, and new agent ids from the request that launches them, so applying the same
entries again yields byte-identical output.
"""

from __future__ import annotations

import hashlib

from bus.envelope import MAX_ID_CHARS

__all__ = [
    "delegate_agent_id",
    "emitted_id",
    "recovery_agent_id",
    "recovery_request_id",
    "resume_request_id",
    "retry_agent_id",
    "retry_request_id",
]


def _digest(*parts: str, length: int = 16) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:length]


def emitted_id(input_id: str, n: int) -> str:
    """The id of the ``n``-th envelope (from 0) emitted while applying envelope ``input_id``:
    ``<input_id>.<n>``, which names its cause, or a hash of the two when that would be too long.

    Distinct inputs and positions give distinct ids: ``n`` has no dot, so cutting an id at its last dot
    gives back both, and a hash (hex digits only) is never one of those (which all hold a dot).
    """
    emitted = f"{input_id}.{n}"
    if len(emitted) <= MAX_ID_CHARS:
        return emitted
    return hashlib.sha256(f"{input_id}:{n}".encode()).hexdigest()[:32]


def delegate_agent_id(group_id: str, request_id: str) -> str:
    """The agent launched for an approved delegation request of a group (a request id is derived from
    the requester's id, time and task, which two groups' agents can share)."""
    return f"agent-{_digest('delegate', group_id, request_id)}"


def retry_request_id(group_id: str, agent_id: str, attempt: int) -> str:
    """The launch request of attempt ``attempt`` of a failed agent's work (the same agent id may name
    agents of two groups: each has its own retry)."""
    return f"rty-{_digest('retry', group_id, agent_id, str(attempt))}"


def retry_agent_id(group_id: str, agent_id: str, attempt: int) -> str:
    """The agent that makes attempt ``attempt`` of a failed agent's work."""
    return f"agent-{_digest('retry', group_id, agent_id, str(attempt))}"


def recovery_request_id(envelope_id: str) -> str:
    """The launch request of the error-recovery option ``delegate`` chosen by envelope ``envelope_id``."""
    return f"rcv-{_digest('recover', envelope_id)}"


def recovery_agent_id(request_id: str) -> str:
    """The agent that takes over the failing work of an error recovery."""
    return f"agent-{_digest('recover-agent', request_id)}"


def resume_request_id(agent_id: str, envelope_id: str) -> str:
    """The launch request that starts ``agent_id`` again with the directive that ``envelope_id`` caused."""
    return f"rsm-{_digest('resume', agent_id, envelope_id)}"
