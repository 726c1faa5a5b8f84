"""Publishing a human command: checked first as a coordinator will apply it, then waited on.

A command is built from the committed group states with what is queued before it applied
(:mod:`coordinator.queued`), and refused before it is published when the rules would reject it (worded as
the coordinator would refuse it). While a coordinator holds the shard, the command waits for its decision
on the envelope and says it; with none running, the envelope waits for one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import click

from bus.cli_connection import run_command
from bus.connection import Client, as_text, connect, translated
from bus.display import one_line
from bus.envelope import Envelope, Payload, decode, new_envelope
from bus.errors import BusError, DecodeError
from bus.events import Decision, DecisionType
from bus.keys import Keys, StreamKind, open_namespace
from bus.progress import Progress
from bus.publisher import Publisher
from bus.settings import Settings
from bus.stream_replies import streams_entries
from coordinator.lease import lease_key
from coordinator.policy import Policy
from coordinator.queued import projected, queued_before
from coordinator.rules import apply
from coordinator.rules.step import Rejected
from coordinator.runtime import no_collection
from coordinator.state import AgentRecord, GroupState
from coordinator.view import (
    UnknownAgent,
    find_agent,
    load_groups,
    no_coordinator_note,
    retired_agent_note,
    retired_note,
)

__all__ = ["Build", "How", "agent_group", "group_of", "only", "publish_command"]

Build = Callable[[list[GroupState]], tuple[Payload, str, str]]
"""From the committed groups: the payload, the target agent id and its group id."""


@dataclass(frozen=True)
class How:
    """What every human command takes: the group its id is in, how long to wait for the decision, and
    the policy it is checked under."""

    group_id: str | None
    wait_s: float
    policy: Policy
    key: bytes | None = field(default=None, repr=False)
    """The key the command is signed with (:mod:`bus.human_key`), when given."""


def only(holding: list[GroupState], what: str, check: Callable[[GroupState], object]) -> GroupState:
    """The one group of ``holding`` where ``check`` passes; an error naming the groups otherwise."""
    fits: list[GroupState] = []
    errors: list[str] = []
    for group in holding:
        try:
            check(group)
        except Rejected as exc:
            if len(holding) == 1:
                raise
            errors.append(f"in group {group.group_id!r}: {exc}")
        else:
            fits.append(group)
    if len(fits) == 1:
        return fits[0]
    if not fits:
        raise BusError("; ".join(errors))
    names = ", ".join(repr(g.group_id) for g in fits)
    raise BusError(f"{what} is known in groups {names}: choose one with --group")


def agent_group(
    groups: list[GroupState], agent_id: str, group_id: str | None, check: Callable[[AgentRecord], object]
) -> GroupState:
    """The group whose agent ``agent_id`` the command applies to (``check`` passes on its record)."""
    return group_of(groups, agent_id, group_id, lambda g: check(g.agents[agent_id]))


def group_of(
    groups: list[GroupState], agent_id: str, group_id: str | None, check: Callable[[GroupState], object]
) -> GroupState:
    """The group of agent ``agent_id`` where ``check`` passes."""
    holding = [g for g in groups if agent_id in g.agents]
    if not holding and group_id is not None:
        raise BusError(f"no agent {agent_id!r} in group {group_id!r}")
    if not holding:
        find_agent(groups, agent_id)  # raises, naming the known agents
    return only(holding, f"agent {agent_id!r}", check)


async def _publish(
    settings: Settings, how: How, build: Build, source: str, subject: str
) -> tuple[Envelope, Decision | str | None, str]:
    """The envelope published, what a coordinator made of it (:func:`_decision`), and, when that is not
    known, why (no coordinator held the shard, no decision came, or it could not be read). ``subject``
    is the agent or request it is about."""
    group_id = how.group_id
    client = await connect(settings)
    try:
        keys = await open_namespace(client, settings.namespace, settings.shards, create=False)

        def load() -> Awaitable[list[GroupState]]:
            return load_groups(client, keys, group_id, findings=False)

        # Checked as a coordinator will apply it: after what is queued before it (coordinator.queued), a
        # model per queued entry, which the collector would walk again and again, finding nothing.
        with no_collection(), Progress() as progress:
            groups, queued = await projected(
                client, keys, load, group_id, how.policy, key=how.key, progress=progress.update
            )
        if group_id is not None and not groups:
            retired = await retired_note(client, keys, group_id)
            unknown = f"no group {group_id!r} is known to the coordinators"
            raise BusError(retired or unknown + await no_coordinator_note(client, keys))
        try:
            payload, agent_id, group_id = build(groups)
        except UnknownAgent as exc:
            retired = await retired_agent_note(client, keys, exc.agent_id)
            if retired is None:
                raise BusError(f"{exc}{await no_coordinator_note(client, keys)}") from None
            raise BusError(retired) from None
        except BusError as exc:
            raise BusError(one_line(f"{exc}{queued_before(queued, subject, group_id)}")) from None
        envelope = new_envelope(payload, agent_id=agent_id, group_id=group_id, source=source)
        state = next(g for g in groups if g.group_id == group_id)
        rejected = apply(state, envelope, how.policy).rejected
        if rejected is not None:
            raise BusError(one_line(f"{rejected}{queued_before(queued, subject, group_id)}"))
        decision, why = await _send(client, keys, envelope, how)
        return envelope, decision, why
    finally:
        await client.aclose()


async def _send(
    client: Client, keys: Keys, envelope: Envelope, how: How
) -> tuple[Decision | str | None, str]:
    """Publish a checked command: what a coordinator made of it and, when that is not known, why."""
    shard = keys.shard_of(envelope.group_id)
    # the shard's decisions and dead letters, from their ends as they are before the command
    cursors: dict[str, Any] = {
        keys.stream(shard, kind): "0-0" for kind in (StreamKind.EVENTS, StreamKind.DEAD)
    }
    with translated():
        for stream in cursors:
            last: Any = await client.xrevrange(stream, count=1)
            cursors[stream] = last[0][0] if last else "0-0"
        held = bool(await client.exists(lease_key(keys, shard)))
    entry_id = await Publisher(client, keys).publish(envelope, signed_with=how.key)
    if not held:
        return None, "no coordinator runs now"
    if not how.wait_s:
        return None, "its decision not waited for"
    signals = keys.stream(shard, StreamKind.SIGNALS)
    try:
        decision = await _decision(client, cursors, envelope, (signals, entry_id), how.wait_s)
    except BusError as exc:  # published all the same: the command is on the bus, not failed
        return None, one_line(f"its decision could not be read: {exc}")
    except asyncio.CancelledError:  # Ctrl-C: the wait ends, not the command, which is on the bus
        click.echo(
            f"interrupted: {envelope.source} {envelope.id} was published before, and a coordinator decides it "
            "all the same (`subagent-bus status` shows what became of it)",
            err=True,
        )
        raise
    return decision, f"no decision within {how.wait_s:g}s"


async def _decision(
    client: Client, cursors: dict[Any, Any], cause: Envelope, entry: tuple[str, str], wait_s: float
) -> Decision | str | None:
    """What a coordinator made of ``cause`` (a command, ``entry``: its stream and entry id), if it says
    so within ``wait_s`` (a running coordinator does within milliseconds): the decision on the events
    stream that the command made about its own agent, or, when it was dead-lettered (not signed with
    the coordinators' key, say), the dead letter's reason. ``cursors``: where to read those streams from.

    A command's decisions are committed together, and a rule may decide a launch first (a delegate, a
    resume launch): the one printed is the command's own (``answered ...; still blocked``), not that."""
    deadline = time.monotonic() + wait_s
    where = [value.encode() for value in entry]
    while time.monotonic() < deadline:
        with translated():
            reply = await client.xread(cursors, count=1000, block=500)
        found: list[tuple[bool, Decision]] = []
        for stream, entry_id, fields in streams_entries(reply):
            cursors[stream] = entry_id
            if [fields.get(b"stream"), fields.get(b"entry_id")] == where:
                return as_text(fields.get(b"reason") or b"dead-lettered")
            with contextlib.suppress(DecodeError):
                decided = decode(fields.get(b"data"))
                payload = decided.payload
                if isinstance(payload, Decision) and payload.cause == cause.id:
                    own = (
                        decided.agent_id == cause.agent_id
                        and payload.decision is not DecisionType.LAUNCH_REQUESTED
                    )
                    found.append((own, payload))
        if found:
            return next((payload for own, payload in found if own), found[0][1])
    return None


def publish_command(settings: Settings, how: How, build: Build, source: str, subject: str) -> None:
    envelope, decision, why = run_command(_publish(settings, how, build, source, subject))
    if isinstance(decision, str):
        raise click.ClickException(f"{source} {envelope.id} was dead-lettered by the coordinator: {decision}")
    if decision is None:
        click.echo(f"queued {source} as {envelope.id} ({why}); a coordinator applies it in order")
        return
    detail = one_line(decision.detail)  # whole: its end may say the agent still waits ("; still blocked")
    if decision.decision is DecisionType.REJECTED:
        raise click.ClickException(f"{source} {envelope.id} was rejected by the coordinator: {detail}")
    click.echo(f"{source} applied as {envelope.id}: {decision.decision.value}: {detail}")
