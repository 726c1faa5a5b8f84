"""Waiting for a directive: ``subagent-bus listen`` blocks on an agent's inbox and exits when one arrives.

An agent runs in turns: it works, its turn ends, something starts it again. Seed 000's clarification
protocol has the agent block until its answers arrive; ``listen`` is that block for a turn-based agent.
Started in the background before the agent's turn ends, it exits the moment a directive arrives and
prints the rendered resume prompt (or, with ``--json``, the envelope), and its exit is what wakes a runner
that re-invokes the agent when a background process finishes.

The inbox is read by :class:`~agents.inbox_listener.InboxListener`: the consumer group and consumer it
reads as, and how it takes over entries a dead listener or adapter left, are told there.

A directive of another group (the inbox is per agent id and shard, and a mistyped ``--group`` may hash to
the agent's real group's shard) is neither printed nor acknowledged: the listener exits with an error,
and a listener of the directive's own group claims it once it is idle for ``claim_idle_ms``.

Delivery is at least once: a listener that printed but could not acknowledge (the server went away at
that instant) leaves the directive to be printed again by the next listener.

Fault injection: when the environment variable ``SUBAGENT_BUS_LISTEN_PAUSE_BEFORE_PRINT`` names a file,
the listener writes the entry id there after reading a directive and then waits, without printing or
acknowledging, until it is killed; ``SUBAGENT_BUS_LISTEN_PAUSE_AFTER_PRINT`` does the same once the
directive is printed, before it is acknowledged. Tests use them to kill a listener at exactly those points;
they have no other use.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import stat
import sys
from pathlib import Path
from typing import IO, Final

import click

from agents.adapter import AgentBus, connect_bus, stderr_log
from agents.delivery import write_all
from agents.inbox_listener import DEFAULT_CLAIM_IDLE_MS, STALL_GRACE_S, InboxListener, Received
from agents.options import check_id
from bus.cli_connection import redis_options, run_command
from bus.connection import translated
from bus.envelope import encode
from bus.errors import BusError
from bus.keys import agent_field
from bus.output import stdout_closed
from bus.params import MILLISECONDS, EnvOption, FiniteFloatRange
from bus.settings import Settings

__all__ = [
    "EXIT_ERROR",
    "EXIT_RECEIVED",
    "EXIT_TIMEOUT",
    "PAUSE_AFTER_ENV",
    "PAUSE_ENV",
    "listen",
    "render",
    "write_out",
]

EXIT_RECEIVED: Final = 0
EXIT_ERROR: Final = 1
EXIT_TIMEOUT: Final = 3
PAUSE_ENV: Final = "SUBAGENT_BUS_LISTEN_PAUSE_BEFORE_PRINT"
PAUSE_AFTER_ENV: Final = "SUBAGENT_BUS_LISTEN_PAUSE_AFTER_PRINT"
_UNKNOWN_AFTER_S: Final = 1.0
"""How long a listener waits before it looks whether the coordinators know its group and agent."""
ACK_GRACE_S: Final = 10.0
"""How long a directive printed waits for its acknowledgement (:func:`_acknowledge`)."""


def render(received: Received, as_json: bool) -> bytes:
    """What ``listen`` prints: the resume prompt, or the envelope as one line of JSON."""
    if as_json:
        return encode(received.directive.envelope) + b"\n"
    return received.directive.prompt.rstrip("\n").encode() + b"\n"


def write_out(data: bytes, out: IO[bytes]) -> None:
    """Write and flush (and fsync when ``out`` is a regular file); ``OSError`` when that failed."""
    write_all(out, data)
    try:
        fd = out.fileno()
    except (OSError, ValueError, AttributeError):
        return  # no file descriptor behind it: flushed is all there is
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        return  # a pipe, a terminal: nothing to sync
    try:
        os.fsync(fd)
    except OSError as exc:
        # A file system that cannot sync is no failure; one that could not write the bytes (EIO,
        # ENOSPC surfacing at the sync) is: the caller must not acknowledge what is not on disk.
        if exc.errno not in (errno.EINVAL, errno.EROFS):
            raise


def _pause_requested(received: Received, variable: str) -> bool:
    """The test-only hooks of the module docstring: say where we are; whether to wait to be killed."""
    path = os.environ.get(variable)
    if not path:
        return False
    Path(path).write_text(received.delivery.entry_id, encoding="utf-8")
    return True


async def _warn_if_unknown(bus: AgentBus) -> None:
    """Once the wait lasts (a directive already there is printed at once), a word when the coordinators
    know no such group, or no such agent in it: a mistyped ``--group`` or ``--agent-id`` waits for ever."""
    await asyncio.sleep(_UNKNOWN_AFTER_S)
    keys, group_id, agent_id = bus.keys, bus.group_id, bus.agent_id
    shard = keys.shard_of(group_id)
    with contextlib.suppress(BusError), translated():  # a user not allowed to read states, a server away
        if not await bus.client.sismember(keys.groups(shard), group_id):
            unknown = f"no group {group_id!r} is known to the coordinators yet"
        elif not await bus.client.hexists(keys.group(shard, group_id), agent_field(agent_id)):
            unknown = f"group {group_id!r} has no agent {agent_id!r} yet, as far as the coordinators know"
        else:
            return
        bus.log(f"{unknown}: waiting all the same (check --agent-id and --group)")


async def _listen(bus: AgentBus, timeout_s: float | None, as_json: bool, claim_idle_ms: int) -> int:
    listener = InboxListener(
        bus.client, bus.inbox, claim_idle_ms=claim_idle_ms, log=bus.log, group_id=bus.group_id
    )
    warning = asyncio.create_task(_warn_if_unknown(bus))
    try:
        received = await listener.next(timeout_s)
    finally:
        warning.cancel()
    if received is None:
        bus.log(f"no directive for {bus.agent_id} within {timeout_s:g}s")
        return EXIT_TIMEOUT
    if _pause_requested(received, PAUSE_ENV):
        await asyncio.Event().wait()
    # in a thread, the entry held fresh meanwhile (until it is acknowledged): a reader slow to read a long
    # directive holds the write, and another listener or an adapter would take the entry for one a dead
    # listener left
    holding = asyncio.create_task(listener.hold(received))
    try:
        try:
            await asyncio.to_thread(write_out, render(received, as_json), sys.stdout.buffer)
        except (OSError, ValueError) as exc:
            bus.log(f"cannot print the directive ({exc}); it stays in the inbox for the next listener")
            return EXIT_ERROR
        if _pause_requested(received, PAUSE_AFTER_ENV):
            await asyncio.Event().wait()
        await _acknowledge(bus, listener, received)
    finally:
        holding.cancel()
    return EXIT_RECEIVED


async def _acknowledge(bus: AgentBus, listener: InboxListener, received: Received) -> None:
    """Acknowledge a directive printed, waiting :data:`ACK_GRACE_S` at most: a server that never answers
    would hold the agent's runner (which the exit wakes) for the socket timeout; one that answers late (a
    failover's pause) is waited for, as the process leaving would drop the acknowledgement it queued, and
    the next listener print the directive again."""
    try:
        async with asyncio.timeout(ACK_GRACE_S):
            await listener.ack(received)
    except (BusError, TimeoutError) as exc:  # printed all the same: the agent has it, may get it again
        why = str(exc) or f"no answer within {ACK_GRACE_S:g}s"
        bus.log(f"printed, but not acknowledged ({why}): the next listener may print it again")


@click.command("listen")
@click.option(
    "--agent-id",
    envvar="SUBAGENT_BUS_AGENT_ID",
    cls=EnvOption,
    required=True,
    callback=check_id,
    help="The agent whose inbox to wait on.",
)
@click.option(
    "--group",
    "group_id",
    envvar="SUBAGENT_BUS_GROUP",
    cls=EnvOption,
    required=True,
    callback=check_id,
    help="The agent's task group.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=FiniteFloatRange(min=0),
    default=None,
    help="Give up after this many seconds (exit status 3). Default: wait for ever.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the directive's envelope as JSON, not its prompt."
)
@click.option(
    "--claim-idle-ms",
    type=MILLISECONDS,
    default=DEFAULT_CLAIM_IDLE_MS,
    show_default=True,
    help="Take over a directive another listener read but never printed once it has been idle this long.",
)
@redis_options
def listen(
    settings: Settings,
    agent_id: str,
    group_id: str,
    timeout_s: float | None,
    as_json: bool,
    claim_idle_ms: int,
) -> None:
    """Wait for the agent's next directive, print its resume prompt, and exit.

    Run it in the background before the agent's turn ends: its exit wakes whatever re-invokes the agent.
    Exit status: 0 a directive was printed (and consumed), 3 timed out, 1 error, 2 usage error.

    \b
    Example (in the background, before the agent's turn ends):
      subagent-bus listen --agent-id auditor --group audit --timeout 3600 &
    """
    if stdout_closed():  # started with it closed (`>&-`): a directive would be taken, never printed
        raise click.ClickException("stdout is closed: nothing could print the directive")

    async def main() -> int:
        try:
            # a server that does not answer holds the handshake; one that does is given the time to
            # answer even with --timeout 0 (look, do not wait)
            async with asyncio.timeout(None if timeout_s is None else timeout_s + STALL_GRACE_S):
                # nothing can be waiting in a namespace that does not exist: a mistyped --namespace
                bus = await connect_bus(settings, agent_id, group_id, create=False)
        except TimeoutError:
            stderr_log(f"no directive for {agent_id} within {timeout_s:g}s: the server did not answer")
            return EXIT_TIMEOUT
        try:
            return await _listen(bus, timeout_s, as_json, claim_idle_ms)
        finally:
            await bus.client.aclose()

    raise SystemExit(run_command(main(), also=(ValueError,)))
