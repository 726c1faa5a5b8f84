"""Why a launcher does not start an entry of a tasks stream: what the entry alone tells (it is no launch
request, or one with an id the adapter would refuse), and whether the request expired, by the server's
clock."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from agents.options import id_problem
from bus.connection import Client
from bus.consumer import Delivery
from bus.directives import LaunchRequest
from bus.display import cut
from bus.errors import CommandFailed
from bus.keys import Keys, StreamKind
from bus.wire import server_time

__all__ = ["ExpiryClock", "expiry", "refusal"]

log = logging.getLogger("subagent_bus.launcher")


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


class ExpiryClock:
    """The time a request's expiry is compared with: the server's, as in the coordinators' ticks, which the
    expiry is in (:mod:`coordinator.rules.timeouts`), not this machine's, whose clock may be minutes off."""

    def __init__(self, client: Client, keys: Keys) -> None:
        self._client = client
        self._keys = keys
        self._own = False
        """Whether the server refused this user the time."""

    async def now(self, request: LaunchRequest, group_id: str) -> datetime | None:
        """The time now, for ``request`` of ``group_id``; None when the request has no expiry."""
        if request.expires_at is None:
            return None
        if not self._own:
            tasks = self._keys.stream(self._keys.shard_of(group_id), StreamKind.TASKS)
            try:
                return await server_time(self._client, tasks)
            except CommandFailed as exc:  # NOPERM: a launcher user made by an earlier `acl --apply`
                log.warning(
                    "%s: launch requests expire by this machine's clock instead of the server's; "
                    "`subagent-bus acl --apply` again lets this user ask the server",
                    exc,
                )
                self._own = True
        return datetime.now(UTC)
