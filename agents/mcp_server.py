"""The protocol as MCP tools: ``subagent-bus mcp`` serves them over stdio for one agent.

The tools, and how a call becomes a payload and an envelope, are in :mod:`agents.mcp_tools`.

Identity: the server speaks for one agent of one group, fixed when it starts (``--agent-id``/``--group``
or ``SUBAGENT_BUS_AGENT_ID``/``SUBAGENT_BUS_GROUP``). Tools take no agent id; the payload's ``agent_id``
is filled in (a call naming another agent is refused), and a finding or a result report without
``agent`` gets this one, as ``findings add`` does. A server started without an identity lists its
tools, and each call explains how to give it one.

``wait_for_directive`` is ``subagent-bus listen`` as a tool (same consumer group and consumer, see
:mod:`agents.inbox_listener`). Like ``listen``, it acknowledges the directive only once its reply was
written to stdout and flushed: a server killed before that leaves it pending, and the next
``wait_for_directive`` (or ``listen``) delivers it again. At most :data:`MAX_WAITS` waits are in flight
at once: each holds a connection to the server for as long as it blocks, and a client that sends
thousands would take them all (an agent needs one). ``status`` shows the agent its own record as
the coordinator keeps it: the JSON of field ``a:<agent_id>`` of the hash ``{ns:s}:group:<group_id>``
(state, open questions, blocker, progress...). Reading that JSON does not need the coordinator's code, so
``agents`` still never imports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
import threading
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, Final

import anyio
import mcp_types as types
import orjson
from mcp.server import Server, ServerRequestContext
from pydantic import BaseModel, ValidationError

from agents.adapter import AgentBus, connect_bus
from agents.inbox_listener import DEFAULT_CLAIM_IDLE_MS, InboxListener
from agents.mcp_inflight import Reply, RequestsInFlight
from agents.mcp_stdio import After, screened_stdio
from agents.mcp_tools import (
    PROTOCOL_TOOLS,
    ProtocolTool,
    StatusInput,
    ToolInputError,
    WaitInput,
    call_id,
    input_schema,
    payload_of,
    waits,
)
from agents.parser import describe_errors
from agents.verify import Verifier, verified_envelope
from bus.connection import translated
from bus.display import quoted
from bus.envelope import MAX_ENVELOPE_BYTES, Envelope, encode
from bus.errors import BusError, ConnectionFailed, CredentialsRefused
from bus.events import AgentState
from bus.payloads import Payload
from bus.settings import Settings
from bus.waits import backoff

__all__ = ["MAX_WAITS", "Identity", "ProtocolServer"]

MAX_WAITS: Final = 4
"""``wait_for_directive`` calls in flight at once; one more is refused (see the module docstring)."""


@dataclass(frozen=True)
class Identity:
    """The agent the server speaks for."""

    agent_id: str
    group_id: str


def _text(text: str, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=error)


class ProtocolServer:
    """The MCP tools of one agent, on a bus connection opened at the first call that needs it."""

    def __init__(
        self,
        settings: Settings,
        identity: Identity | None,
        *,
        workdir: Path | None = None,
        publish_timeout_s: float = 30.0,
        claim_idle_ms: int = DEFAULT_CLAIM_IDLE_MS,
    ) -> None:
        self.settings = settings
        self.identity = identity
        self.workdir = workdir
        self.publish_timeout_s = publish_timeout_s
        self.claim_idle_ms = claim_idle_ms
        self.source = f"mcp:{uuid.uuid4().hex[:12]}"
        self.tools = {tool.name: tool for tool in PROTOCOL_TOOLS}
        self._bus: AgentBus | None = None
        self._unreachable = ""
        """Why the last try to connect failed, for a call that timed out waiting."""
        self._connecting = asyncio.Lock()
        self._unacked: dict[types.RequestId, Callable[[], Awaitable[None]]] = {}
        """Per request, the acknowledgement of the directive its reply carries, until that is written."""
        self._holding: set[asyncio.Task[None]] = set()
        """The tasks keeping those directives' entries fresh (:meth:`_hold`)."""
        self._waits = 0
        """``wait_for_directive`` calls in flight."""
        self._verifier = Verifier(workdir) if workdir is not None else None
        self._verifying = threading.Lock()
        """Calls are verified in worker threads, one at a time (the verifier's cache is one)."""
        self._unflushed = 0
        """Replies written and not yet flushed (and their directives acknowledged): the end of the input
        waits for them (:meth:`_replies_out`)."""
        self._out = asyncio.Event()

    def server(self) -> Server[Any]:
        """The MCP server (the SDK's low-level one: the schemas are the payload models')."""
        who = (
            f"You are agent {self.identity.agent_id} in task group {self.identity.group_id}. "
            if self.identity
            else ""
        )
        return Server(
            "subagent-bus",
            version=version("subagent-bus"),
            instructions=f"{who}These tools are the subagent communication protocol: signal your parent "
            "with them instead of printing signal blocks, then wait_for_directive for its answer.",
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
        )

    async def serve_stdio(self) -> None:
        """Serve on stdin/stdout until the client closes them (or Ctrl-C)."""
        server = self.server()
        try:
            stdio = screened_stdio(
                sys.stdin.fileno(), on_writing=self._writing, at_end=self._replies_out, endless=waits
            )
            async with stdio as (read_stream, write_stream):
                await server.run(read_stream, write_stream, server.create_initialization_options())
        except* anyio.BrokenResourceError:
            task = asyncio.current_task()
            if task is None or not task.cancelling():
                raise
            raise asyncio.CancelledError from None  # a message came in as Ctrl-C stopped the server
        except* (BrokenPipeError, ConnectionResetError):
            pass  # the client closed its end of our stdout (it crashed): no one is left to answer
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        for holding in self._holding:
            holding.cancel()
        if self._bus is not None:
            await self._bus.client.aclose()
            self._bus = None

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        tools = [
            types.Tool(name=tool.name, description=tool.description, input_schema=input_schema(tool))
            for tool in PROTOCOL_TOOLS
        ]
        for name, model in (("wait_for_directive", WaitInput), ("status", StatusInput)):
            tools.append(
                types.Tool(name=name, description=model.__doc__, input_schema=model.model_json_schema())
            )
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        """Run one tool; every failure is a tool error the agent can read, never a crash."""
        arguments = params.arguments or {}
        try:
            if params.name == "wait_for_directive":
                return await self.wait_for_directive(_validated(WaitInput, arguments), ctx.request_id)
            if params.name == "status":
                _validated(StatusInput, arguments)
                return await self.status()
            tool = self.tools.get(params.name)
            if tool is None:
                return _text(f"unknown tool {quoted(params.name)}", error=True)
            return await self.publish(tool, arguments)
        except ValueError as exc:  # ToolInputError, or a value the bus refuses (an over-long id...)
            return _text(str(exc), error=True)
        except BusError as exc:
            return _text(f"the bus failed: {exc}", error=True)

    async def publish(self, tool: ProtocolTool, arguments: Mapping[str, Any]) -> types.CallToolResult:
        """Validate a call, then publish its envelope exactly as an adapter would."""
        identity = self._identity()
        payload = payload_of(tool, arguments, identity.agent_id)
        # Built, verified (in a worker thread: a finding's line is found by reading its file up to it) and
        # measured before the bus is asked for: an invalid call fails as one, whatever the bus does.
        envelope = await asyncio.to_thread(self._envelope, tool, payload, identity)
        size = len(encode(envelope))
        if size > MAX_ENVELOPE_BYTES:
            raise ToolInputError(f"the {tool.name} call is {size} bytes encoded, over {MAX_ENVELOPE_BYTES}")
        try:
            async with asyncio.timeout(self.publish_timeout_s):  # connecting included
                bus = await self._connected(waiting=True)
                await bus.publish([envelope])
        except TimeoutError:
            if self._bus is None:
                why = f" ({self._unreachable})" if self._unreachable else ""
                return _text(
                    f"the bus could not be reached within {self.publish_timeout_s:g}s{why}; the "
                    f"{tool.name} call was not published",
                    error=True,
                )
            return _text(
                f"the bus did not answer within {self.publish_timeout_s:g}s; the {tool.name} call "
                "may or may not have been published",
                error=True,
            )
        return _text(
            f"published {envelope.type.value} {envelope.id} for agent {identity.agent_id} "
            f"in group {identity.group_id}.{tool.hint}"
        )

    def _envelope(self, tool: ProtocolTool, payload: Payload, identity: Identity) -> Envelope:
        """The call's envelope, as an adapter with the same --workdir would publish it."""
        call = call_id(tool, payload, identity.agent_id)  # of the call as made: the same call, the same id
        with self._verifying:
            return verified_envelope(
                self._verifier,
                payload,
                agent_id=identity.agent_id,
                group_id=identity.group_id,
                source=self.source,
                id=call,
            )

    async def wait_for_directive(
        self, request: WaitInput, request_id: types.RequestId | None = None
    ) -> types.CallToolResult:
        """``listen`` as a tool: the next directive's resume prompt, or a timeout message.

        The directive is acknowledged once the reply to ``request_id`` is written (:meth:`_writing`).
        """
        if self._waits >= MAX_WAITS:
            raise ToolInputError(
                f"{MAX_WAITS} calls of wait_for_directive are waiting already: wait for their answers (one "
                "wait at a time is enough; each holds a connection to the bus)"
            )
        self._waits += 1
        try:
            return await self._wait(request, request_id)
        finally:
            self._waits -= 1

    async def _wait(self, request: WaitInput, request_id: types.RequestId | None) -> types.CallToolResult:
        bus = await self._connected()
        listener = InboxListener(
            bus.client, bus.inbox, claim_idle_ms=self.claim_idle_ms, log=bus.log, group_id=bus.group_id
        )
        received = await listener.next(request.timeout_seconds)
        if received is None and listener.unanswered:
            return _text(
                f"the bus did not answer within {request.timeout_seconds:g} s (stalled, or the network "
                "swallows its replies): no directive could be read; wait again later",
                error=True,
            )
        if received is None and listener.unreachable is not None:  # said as the bus's other failures
            raise listener.unreachable
        if received is None and listener.left:  # the wait's only directives were another group's
            raise ToolInputError("; ".join(listener.left.values()))
        if received is None:
            return _text(f"no directive within {request.timeout_seconds:g} s")
        if request_id is None:  # not served over stdio: nothing reports the reply written
            await listener.ack(received)
        else:
            holding = asyncio.create_task(listener.hold(received))
            self._holding.add(holding)
            holding.add_done_callback(self._holding.discard)

            async def ack() -> None:
                holding.cancel()
                await listener.ack(received)

            self._unacked[request_id] = ack
        return _text(received.directive.prompt)

    def _writing(self, reply: Reply | None) -> After | None:
        """A reply goes out on stdout: what runs once it is flushed (the SDK flushes each line it writes):
        the acknowledgement of the directive it carries, if any, and the count the end of the input waits
        on. Taken off ``_unacked`` now: once the reply is out, the client may send its id again."""
        if reply is None:
            return None
        # only a result carries a directive: an error under its id is the refusal of another request sent
        # under it while it was in flight (agents.mcp_inflight)
        ack = self._unacked.pop(reply.request_id, None) if reply.result and self._unacked else None
        self._unflushed += 1
        return functools.partial(self._written, ack)

    async def _written(self, ack: Callable[[], Awaitable[None]] | None) -> None:
        if ack is not None:
            await _acknowledge(ack)
        self._unflushed -= 1
        self._out.set()

    async def _replies_out(self, in_flight: RequestsInFlight) -> None:
        """Until every request in flight is answered (but a wait for a directive, which may take an hour,
        and one the client cancelled), and every answer is out: at the end of the input the SDK would
        cancel them, and answer an error for a call whose signal may have gone out (a client that sends it
        again would publish it twice), or one it had not yet begun to run."""
        with contextlib.suppress(TimeoutError):  # each publishes within its timeout: this is a last guard
            async with asyncio.timeout(2 * self.publish_timeout_s):
                await in_flight.settled()
                while self._unflushed:
                    self._out.clear()
                    await self._out.wait()

    async def status(self) -> types.CallToolResult:
        """The agent's record in the coordinator's group state (JSON), read without the coordinator."""
        identity = self._identity()
        bus = await self._connected()
        key = bus.keys.state(bus.shard, f"group:{identity.group_id}")
        with translated():
            raw = await bus.client.hget(key, f"a:{identity.agent_id}")
        if raw is None:
            return _text(
                f"the coordinator has no record of agent {identity.agent_id} in group "
                f"{identity.group_id} yet (it registers an agent at its first signal)"
            )
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            return _text(f"the stored record of {identity.agent_id} is not JSON: {exc}", error=True)
        if not isinstance(record, dict):
            return _text(f"the stored record of {identity.agent_id} is not a JSON object", error=True)
        # Records are stored without their default values; the state is the one worth spelling out.
        record = {"state": AgentState.RUNNING.value, **record}
        return _text(orjson.dumps(record, option=orjson.OPT_INDENT_2).decode())

    def _identity(self) -> Identity:
        if self.identity is None:
            raise ToolInputError(
                "this server has no agent identity: start it with --agent-id and --group "
                "(or SUBAGENT_BUS_AGENT_ID and SUBAGENT_BUS_GROUP in its environment)"
            )
        return self.identity

    async def _connected(self, *, waiting: bool = False) -> AgentBus:
        """The connection to the bus, made at the first call. ``waiting``: an unreachable server is tried
        again, after a wait that doubles, until the caller's timeout (a publishing call waits for the bus
        as it does once connected); else its error is the call's."""
        identity = self._identity()
        delays = backoff()
        while True:
            async with self._connecting:  # one try at a time; the waits between them hold no one up
                if self._bus is not None:
                    return self._bus
                try:
                    self._bus = await connect_bus(
                        self.settings, identity.agent_id, identity.group_id, workdir=self.workdir
                    )
                    return self._bus
                except CredentialsRefused:
                    raise  # no outage: waiting would not end it
                except ConnectionFailed as exc:
                    if not waiting:
                        raise
                    self._unreachable = str(exc)
            await asyncio.sleep(next(delays))


async def _acknowledge(ack: Callable[[], Awaitable[None]]) -> None:
    try:
        await ack()
    except BusError as exc:  # still pending: the next wait_for_directive (or listen) has it again
        sys.stderr.write(f"subagent-bus mcp: a delivered directive was not acknowledged: {exc}\n")


def _validated(model: type[BaseModel], arguments: Mapping[str, Any]) -> Any:
    try:
        return model.model_validate(arguments)
    except ValidationError as exc:
        raise ToolInputError(f"invalid arguments: {describe_errors(exc, limit=10)}") from None
