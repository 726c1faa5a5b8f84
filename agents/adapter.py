"""The shared core of the adapters: an agent's output in, envelopes on the bus out.

:class:`AgentBus` is one agent's place on the bus (its group's shard, its signals stream, its inbox) and
publishes envelopes there, one round trip per batch; a batch that carries a state write (the offset
checkpoint of a file adapter) goes in one MULTI/EXEC, so a checkpoint never disagrees with what was
published.
:class:`~agents.output_stream.OutputStream` (re-exported here, with :func:`completes`) parses one output
of the agent into the envelopes it publishes. Lifecycle events (AGENT_STARTED, HEARTBEAT, AGENT_EXITED)
come from here too.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

from agents.lost import AWAITED, lost_signal
from agents.output_stream import OutputStream, completes
from agents.sending import GaveUp, Sender
from agents.verify import Verifier, verified_envelope
from bus import wire
from bus.connection import Client, connect
from bus.envelope import MAX_ENVELOPE_BYTES, Envelope, Payload, encode, new_envelope
from bus.events import AgentExited, AgentStarted, Heartbeat
from bus.keys import Keys, StreamKind, open_namespace
from bus.metrics import AdapterMetrics
from bus.settings import Settings
from bus.waits import wait_for

__all__ = [
    "MARK_TTL_S",
    "MAX_TASK_CHARS",
    "AgentBus",
    "GaveUp",
    "OutputStream",
    "completes",
    "connect_bus",
    "heartbeat_loop",
    "oversize",
    "stderr_log",
]

MAX_TASK_CHARS: Final = 256 * 1024
"""A task longer than this is cut in AGENT_STARTED (the prompt itself is not touched)."""
MARK_TTL_S: Final = 30 * 24 * 3600
"""How long a mark published with entries to say they were (``state_ttl_s`` of :meth:`AgentBus.publish`)
is kept: 30 days, far longer than the retry of a command or the restart of an adapter killed after
publishing takes, and short enough that the server does not keep one key per run ever made."""


def oversize(data: bytes) -> str | None:
    """Why :meth:`AgentBus.publish` would leave an envelope encoded as ``data`` out, or None if it fits.

    For callers that must refuse or report such an envelope themselves, before anything is published
    (they pass the bytes on to :meth:`AgentBus.publish` as ``encoded``).
    """
    if len(data) <= MAX_ENVELOPE_BYTES:
        return None
    return f"{len(data)} bytes encoded, over the {MAX_ENVELOPE_BYTES}-byte limit of an envelope"


def stderr_log(message: str) -> None:
    """Where adapters report what they cannot publish: the adapter's own stderr, one line each."""
    print(f"subagent-bus: {message}", file=sys.stderr, flush=True)


class AgentBus:
    """One agent's connection to the bus: its shard, streams and inbox, and publishing there."""

    def __init__(
        self,
        client: Client,
        keys: Keys,
        agent_id: str,
        group_id: str,
        *,
        verifier: Verifier | None = None,
        log: Callable[[str], None] = stderr_log,
        metrics: AdapterMetrics | None = None,
        patience: float | None = None,
    ) -> None:
        if not agent_id or len(agent_id) > 256 or not group_id or len(group_id) > 256:
            raise ValueError("the agent id and the group id must be 1 to 256 characters")
        self.client = client
        self.keys = keys
        self.agent_id = agent_id
        self.group_id = group_id
        self.verifier = verifier
        self.log = log
        self.warn = log
        """Where what went wrong is said (the CLI routes :attr:`log` to logging's INFO, this to WARNING)."""
        self.metrics = metrics
        """Where what this agent's output becomes is counted, if anywhere."""
        self.shard = keys.shard_of(group_id)
        self.signals = keys.stream(self.shard, StreamKind.SIGNALS)
        self._signals = self.signals.encode()
        # self.warn may be replaced later (the CLI routes it to logging): look it up at each call
        self.sender = Sender(client, self.signals, lambda message: self.warn(message), patience=patience)  # noqa: PLW0108
        """Where batches go, one at a time, in the order :meth:`publish` was called; a command gives it
        the ``patience`` after which a batch the server does not take raises :class:`~agents.sending.NotTaken`."""
        self._foreign_id_seen = False
        self.inbox = keys.inbox(self.shard, agent_id)
        self.completed = False
        """A COMPLETION_REPORT or RESULT of this agent has been published."""
        self.completion = asyncio.Event()
        """Set once :attr:`completed` is."""

    def foreign_id(self, claimed: str, source: str) -> None:
        """A signal in this agent's output names another agent id: it is published as this agent's
        all the same (the envelope's ``agent_id``; the payload keeps what the agent wrote), and the
        first such mismatch is logged."""
        if not self._foreign_id_seen:
            self._foreign_id_seen = True
            self.warn(
                f"{source}: a signal says agent_id {claimed!r}; it is published as agent {self.agent_id!r} "
                "(--agent-id); further mismatches are not reported"
            )

    def state_key(self, name: str) -> str:
        """A state key in the group's shard (one hash slot with the streams)."""
        return self.keys.state(self.shard, name)

    def envelope(
        self, payload: Payload, *, source: str, id: str | None = None, agent_id: str | None = None
    ) -> Envelope:
        """An envelope of this agent (or of ``agent_id`` in the same group); with a workdir, its file
        references are verified first."""
        return verified_envelope(
            self.verifier,
            payload,
            agent_id=agent_id or self.agent_id,
            group_id=self.group_id,
            source=source,
            id=id,
        )

    async def publish(
        self,
        envelopes: Sequence[Envelope],
        *,
        encoded: Sequence[bytes] | None = None,
        state: Mapping[str, bytes] | None = None,
        state_ttl_s: int | None = None,
        wait: bool = True,
    ) -> None:
        """Append ``envelopes`` to the signals stream, in order, in one round trip.

        ``encoded``: the envelopes' bytes, when the caller has encoded them already. An envelope over
        ``MAX_ENVELOPE_BYTES`` encoded is logged and left out (see :func:`oversize`).
        With ``state`` (a checkpoint) everything goes in one MULTI/EXEC: the entries and the state
        that accounts for them are written together or not at all (with ``state_ttl_s``, each state key
        expires after that many seconds). An unreachable server is retried
        with backoff until it answers (agent output is not dropped while it is briefly away) or until a
        stop signal gives up (:meth:`Sender.give_up`: :class:`GaveUp` is raised); the batch is sent
        again with the same ids, so an entry written twice is recognised downstream.

        ``wait=False`` returns once the batch is written, before the server's replies: they are read
        by the next call or by :meth:`flush`, and the caller parses its next output meanwhile. A batch
        that completes the agent is always waited for.
        """
        batch: list[bytes] = []
        sent: list[Envelope] = []
        completing = False
        datas = encoded if encoded is not None else [encode(envelope) for envelope in envelopes]
        for pair in zip(envelopes, datas, strict=True):
            kept = pair if len(pair[1]) <= MAX_ENVELOPE_BYTES else self._too_large(*pair)
            if kept is None:
                continue
            envelope, data = kept
            batch.append(data)
            sent.append(envelope)
            completing = completing or completes(envelope)
        if batch or state:
            # a state write must land with the entries it accounts for; plain batches need no MULTI
            commands: list[wire.Command] = [(b"XADD", self._signals, b"*", b"data", data) for data in batch]
            expiry = () if state_ttl_s is None else (b"EX", b"%d" % state_ttl_s)
            commands += [(b"SET", key.encode(), value, *expiry) for key, value in (state or {}).items()]
            types = [envelope.type for envelope in sent]
            await self.sender.send(commands, types, state or {}, wait=wait or completing)
        if self.metrics is not None:
            for envelope in sent:
                self.metrics.published(envelope)
        if completing:
            self.mark_completed()

    def _too_large(self, envelope: Envelope, data: bytes) -> tuple[Envelope, bytes] | None:
        """What is published instead of an envelope over the size limit: a STOP_WORK error in place of
        a signal the agent waits on (:mod:`agents.lost`), else nothing."""
        why = f"it is {len(data)} bytes encoded, over the {MAX_ENVELOPE_BYTES}-byte limit of an envelope"
        self.warn(f"{self.agent_id}: {envelope.type.value} {envelope.id} not published: {why}")
        if self.metrics is not None:
            self.metrics.rejected.labels("too_large").inc()
        if envelope.type not in AWAITED:
            return None
        lost = lost_signal(self.agent_id, envelope.type, f"envelope {envelope.id}", why)
        instead = new_envelope(
            lost, agent_id=self.agent_id, group_id=self.group_id, source=envelope.source, id=envelope.id
        )
        return instead, encode(instead)

    async def flush(self) -> None:
        """Wait until what :meth:`publish` sent without waiting is on the server."""
        await self.sender.flush()

    def mark_completed(self) -> None:
        """Record that the agent completed (a completion report or result was published)."""
        self.completed = True
        self.completion.set()

    async def started(
        self,
        *,
        source: str,
        pid: int | None = None,
        command: list[str] | None = None,
        task: str | None = None,
        name: str | None = None,
        id: str | None = None,
        state: Mapping[str, bytes] | None = None,
    ) -> None:
        """AGENT_STARTED (published with ``state``, if any, in one transaction)."""
        if task is not None and len(task) > MAX_TASK_CHARS:
            self.warn(
                f"the task is {len(task)} characters: AGENT_STARTED carries its first {MAX_TASK_CHARS} "
                "(status, a retry of the agent's work and a relaunch of it see only those)"
            )
            task = task[:MAX_TASK_CHARS] + "\n…(cut)"
        event = AgentStarted(pid=pid, command=command, task=task, name=name)
        envelope = new_envelope(event, agent_id=self.agent_id, group_id=self.group_id, source=source, id=id)
        await self.publish([envelope], state=state)

    async def exited(
        self,
        *,
        source: str,
        exit_code: int | None,
        stderr_tail: str | None = None,
        resumable: bool | None = None,
        id: str | None = None,
        state: Mapping[str, bytes] | None = None,
    ) -> None:
        """AGENT_EXITED (published with ``state``, if any, in one transaction)."""
        event = AgentExited(
            exit_code=exit_code,
            completed=self.completed,
            stderr_tail=stderr_tail or None,
            resumable=resumable,
        )
        envelope = new_envelope(event, agent_id=self.agent_id, group_id=self.group_id, source=source, id=id)
        await self.publish([envelope], state=state)

    async def heartbeat(self, *, source: str, pid: int | None) -> None:
        beat = new_envelope(Heartbeat(pid=pid), agent_id=self.agent_id, group_id=self.group_id, source=source)
        await self.publish([beat])


async def connect_bus(
    settings: Settings,
    agent_id: str,
    group_id: str,
    *,
    workdir: Path | None = None,
    metrics: AdapterMetrics | None = None,
    create: bool = True,
    patience: float | None = None,
) -> AgentBus:
    """An :class:`AgentBus` on a new connection (close it with ``bus.client.aclose()``); what it
    publishes is counted in ``metrics``. ``create=False`` refuses a namespace that does not exist
    (:class:`~bus.errors.NamespaceMissing`) instead of creating it; ``patience``: see :class:`AgentBus`."""
    verifier = Verifier(workdir) if workdir is not None else None
    client = await connect(settings)
    try:
        keys = await open_namespace(client, settings.namespace, settings.shards, create=create)
        return AgentBus(
            client, keys, agent_id, group_id, verifier=verifier, metrics=metrics, patience=patience
        )
    except BaseException:
        await client.aclose()
        raise


async def heartbeat_loop(
    bus: AgentBus,
    interval: float,
    stop: asyncio.Event,
    *,
    source: str,
    alive: Callable[[], bool],
    pid: Callable[[], int | None] = lambda: None,
) -> None:
    """Every ``interval`` seconds, a HEARTBEAT while ``alive()`` says the agent lives, until ``stop``."""
    while not await wait_for(stop, interval):
        if alive():
            await bus.heartbeat(source=source, pid=pid())
