"""Why a launcher does not start an entry of a tasks stream: what the entry alone tells (it is no launch
request, or one with an id the adapter would refuse), and whether the request expired."""

from __future__ import annotations

from datetime import datetime

from agents.options import id_problem
from bus.consumer import Delivery
from bus.directives import LaunchRequest
from bus.display import cut

__all__ = ["expiry", "refusal"]


def refusal(delivery: Delivery) -> str | None:
    """Why an entry of the tasks stream is not a request this launcher can start, if it is not; what
    needs no time (its expiry is :func:`expiry`'s)."""
    envelope = delivery.envelope
    if delivery.error is not None or envelope is None:
        return delivery.error or "undecodable"
    request = envelope.payload
    if not isinstance(request, LaunchRequest):
        return f"{envelope.type.value} is not a launch request"
    for what, value in (("agent id", request.new_agent_id), ("group id", envelope.group_id)):
        if (problem := id_problem(value)) is not None:  # the adapter would refuse it: do not start it
            return f"the {what} {cut(repr(value), 80)} of the launch request {problem}"
    return None


def expiry(request: LaunchRequest, now: datetime | None) -> str | None:
    """Why the request is too late to start, if it is: ``now`` (the server's time; None when the request
    has no expiry) is after its ``expires_at``, when the coordinator declares its agent lost and retries
    it, so that the agent started now would run twice."""
    if request.expires_at is not None and now is not None and now > request.expires_at:
        return (
            f"launch request {request.request_id} expired at {request.expires_at.isoformat()}: its agent "
            f"{request.new_agent_id} was not started in time, and the coordinator declares it lost"
        )
    return None
