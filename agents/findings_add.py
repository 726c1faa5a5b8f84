"""``findings add``: findings from agents that shell out, into the bus.

It takes one JSON object, a JSON array of objects, or JSON lines of :class:`~bus.findings.Finding` fields,
and publishes FINDING envelopes onto the group's signals stream; the coordinator copies each into the
append-only findings stream exactly once. Everything is validated before anything is published: one bad
finding publishes none, and the messages name its line. An envelope's id hashes the agent and the
finding's content, so running the same command again is recognised as a repeat: published with a mark,
kept :data:`MARK_TTL_S`, by which a run killed after publishing and run again publishes nothing twice.
"""

from __future__ import annotations

import codecs
import hashlib
import os
from pathlib import Path
from typing import Final

import click

from agents.adapter import MARK_TTL_S, AgentBus, connect_bus, oversize
from agents.findings_parse import located_findings
from agents.options import check_id
from agents.sending import NotTaken
from agents.whole_input import InputError, read_whole
from bus.cli_connection import redis_options, run_command
from bus.connection import translated
from bus.envelope import Envelope, content_id, encode
from bus.errors import BusError
from bus.findings import Finding
from bus.params import not_blank
from bus.settings import Settings

__all__ = ["EXIT_INVALID", "MAX_INPUT_BYTES", "add"]

MAX_INPUT_BYTES: Final = 64 << 20
"""``findings add`` refuses more input than this."""
EXIT_INVALID: Final = 2
_SOURCE_HINT: Final = " (SOURCE is a file name unless it is - for stdin or starts with { or [ for JSON)"


def _read_input(source: str) -> str:
    if source.lstrip().startswith(("{", "[")):
        data = source.encode()  # an argument: a few hundred KiB at most, as the system allows
    else:
        try:
            data = read_whole(source, MAX_INPUT_BYTES)
        except InputError as exc:
            hint = _SOURCE_HINT if source != "-" and not os.path.lexists(source) else ""
            raise ValueError(f"{exc}{hint}") from None
    try:
        return data.removeprefix(codecs.BOM_UTF8).decode()  # a mark Windows tools write: no content
    except UnicodeDecodeError as exc:
        raise ValueError(f"the input is not UTF-8 (byte {exc.start})") from None


def _fail(messages: list[str]) -> None:
    for message in messages:
        click.echo(f"Error: {message}", err=True)
    raise SystemExit(EXIT_INVALID)


async def _publish(
    bus: AgentBus, envelopes: list[Envelope], datas: list[bytes], mark: dict[str, bytes]
) -> None:
    """Publish the findings with the mark of having done it (the bus's patience ends the retries)."""
    try:
        await bus.publish(envelopes, encoded=datas, state=mark, state_ttl_s=MARK_TTL_S)
    except NotTaken as exc:
        raise BusError(
            f"{exc}: the findings may or may not be published; run the command again once the server "
            "takes writes (a repeat publishes nothing twice)"
        ) from None


@click.command("add")
@click.argument("source", metavar="[JSON|FILE|-]", required=False, default="-", callback=not_blank)
@click.option(
    "--agent-id",
    required=True,
    callback=check_id,
    help="The reporting agent (also the default 'agent' field).",
)
@click.option("--group", "group_id", required=True, callback=check_id, help="The task group.")
@click.option(
    "--workdir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Verify each finding's file:line under this directory (sets 'verified').",
)
@redis_options
def add(settings: Settings, source: str, agent_id: str, group_id: str, workdir: Path | None) -> None:
    """Publish findings: a JSON object, a JSON array, or JSON lines of finding fields.

    SOURCE is - (the default) for stdin; the JSON itself when it starts with { or [; anything else is
    the name of a file holding it (so `findings add 42` looks for a file named 42; a file whose name
    starts with { or [ is given as ./NAME). Nothing is published unless every finding is valid (exit
    status 2 otherwise, with the line of each error).
    """
    try:
        text = _read_input(source)
    except ValueError as exc:
        _fail([str(exc)])
    found, errors = located_findings(text, agent_id)
    if errors:
        _fail(errors)
    if not found:
        _fail(["no findings in the input"])
    first: dict[str, tuple[str, Finding]] = {}  # a finding repeated has the same id: one envelope
    for where, finding in found:
        first.setdefault(content_id(agent_id, "finding", finding), (where, finding))
    repeated, found = len(found) - len(first), list(first.values())

    async def main() -> list[str] | None:
        """The findings too large to publish; nothing is published unless there are none. None when
        the same findings were published before (by a run that may have been killed right after)."""
        # Retried while the server is away or refuses writes for now, as an adapter retries, but given up
        # after the socket timeout rather than hang: a command is no adapter that must not lose anything.
        bus = await connect_bus(
            settings, agent_id, group_id, workdir=workdir, patience=settings.socket_timeout
        )
        try:
            envelopes = [
                bus.envelope(f, source="findings-add", id=content_id(agent_id, "finding", f))
                for _, f in found
            ]
            # A run killed after publishing, run again, must not publish the findings again: their ids
            # are only known duplicates while the group's idempotency window holds them. (The same
            # findings added to another group of the shard have the same ids: the group is in the mark.)
            marked = [group_id, *(e.id for e in envelopes)]
            digest = hashlib.sha256("\n".join(marked).encode()).hexdigest()[:16]
            done = bus.state_key(f"import:add:{digest}")
            with translated():
                if await bus.client.get(done) is not None:
                    return None
            # checked on the envelopes themselves: verification with --workdir changes their size
            datas = [encode(envelope) for envelope in envelopes]
            too_large = [
                f"{where}: {why}"
                for (where, _), data in zip(found, datas, strict=True)
                if (why := oversize(data)) is not None
            ]
            if not too_large:  # all or nothing, with the mark of having done it
                await _publish(bus, envelopes, datas, {done: b"%d" % len(envelopes)})
            return too_large
        finally:
            await bus.client.aclose()

    too_large = run_command(main(), also=(ValueError,))
    if too_large is None:
        click.echo(f"these {len(found)} finding(s) of {agent_id} in group {group_id} were published before")
        return
    if too_large:
        _fail([*too_large, "nothing was published"])
    again = f" ({repeated} repeated in the input, published once)" if repeated else ""
    click.echo(f"published {len(found)} finding(s) of {agent_id} in group {group_id}{again}")
