"""The agent side's turn-based commands: ``listen``, ``mcp`` and ``init`` (with ``init hook-task``).

``agents.commands`` adds :data:`commands` to the root command line. The MCP SDK is imported only when
``mcp`` runs: it takes longer to import than any other command takes to start.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click

from agents.inbox_listener import DEFAULT_CLAIM_IDLE_MS
from agents.init import init
from agents.listen import listen
from agents.options import check_id
from bus.cli_connection import redis_options
from bus.errors import BusError
from bus.output import stdout_closed
from bus.params import MILLISECONDS, EnvOption, FiniteFloatRange
from bus.settings import Settings

__all__ = ["commands", "mcp"]


@click.command("mcp")
@click.option(
    "--agent-id",
    envvar="SUBAGENT_BUS_AGENT_ID",
    cls=EnvOption,
    callback=check_id,
    help="The agent this server speaks for.",
)
@click.option(
    "--group",
    "group_id",
    envvar="SUBAGENT_BUS_GROUP",
    cls=EnvOption,
    callback=check_id,
    help="The agent's task group.",
)
@click.option(
    "--workdir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Verify file:line references, findings and deliverables under this directory.",
)
@click.option(
    "--publish-timeout",
    "publish_timeout_s",
    type=FiniteFloatRange(min=0.1),
    default=30.0,
    show_default=True,
    help="Seconds a publishing tool call waits for an unreachable bus (one restarting, say) before it "
    "reports an error. A status or wait_for_directive call does not wait for one: before the first "
    "connection it reports the error at once, after it when its read fails (--socket-timeout for a bus "
    "that stalls; a wait ends at its own timeout).",
)
@click.option(
    "--claim-idle-ms",
    type=MILLISECONDS,
    default=DEFAULT_CLAIM_IDLE_MS,
    show_default=True,
    help="As for listen: when a directive read by a dead listener is taken over.",
)
@redis_options
def mcp(
    settings: Settings,
    agent_id: str | None,
    group_id: str | None,
    workdir: Path | None,
    publish_timeout_s: float,
    claim_idle_ms: int,
) -> None:
    """Serve the protocol as MCP tools on stdin/stdout, for one agent (see `subagent-bus init`).

    Tools: request_clarification, stop_work, request_delegation, report_completion, report_progress,
    add_finding, submit_result (each publishes the envelope of the equivalent text signal),
    wait_for_directive (like `listen`) and status (the agent's record in the coordinator's state).
    Without --agent-id and --group the tools are listed but every call explains that they are missing.
    """
    from agents.mcp_server import Identity, ProtocolServer  # noqa: PLC0415  (slow import, see above)

    if (agent_id is None) != (group_id is None):
        raise click.UsageError("give both --agent-id and --group, or neither")
    if sys.stdin is None or stdout_closed():  # started with one closed
        raise click.UsageError("stdin or stdout is closed: an MCP client talks to this command through both")
    identity = Identity(agent_id, group_id) if agent_id and group_id else None
    server = ProtocolServer(
        settings, identity, workdir=workdir, publish_timeout_s=publish_timeout_s, claim_idle_ms=claim_idle_ms
    )
    try:
        asyncio.run(server.serve_stdio())
    except (BusError, OSError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None


commands: list[click.Command] = [listen, mcp, init]
"""Waiting for a directive, the protocol as MCP tools, and wiring both into a repository."""
