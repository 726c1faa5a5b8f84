"""``adapter import-findings``: an existing JSONL file of findings into the bus (the seed's shared
``SECURITY_FINDINGS.jsonl``), as FINDING envelopes onto the group's signals stream; the coordinator copies
each into the append-only findings stream exactly once. (``findings add``: :mod:`agents.findings_add`.)

Ids derive from the file and each line's byte offset, and the read offset is checkpointed with every
batch, so an interrupted or repeated import publishes each line once; lines appended later are imported
by the next run. Bad lines are reported with their line numbers and skipped, once: a line over
``MAX_LINE_BYTES`` too, even when its end is not written yet (the checkpoint then records how far into
it the import read, and the next run goes on looking for its end from there). The file follows no schema
of ours, so a field that is not a finding's is left out, and the summary names it.
"""

from __future__ import annotations

import codecs
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import click
import orjson
from pydantic import ValidationError

from agents.adapter import AgentBus, connect_bus, oversize
from agents.findings_add import EXIT_INVALID
from agents.findings_parse import LeftOut, finding_of, parse_findings
from agents.json_keys import keys_given_twice, may_give_twice, twice_message
from agents.lenient_json import not_json
from agents.options import check_id, id_problem
from agents.sending import NotTaken
from agents.watched_file import Checkpoint, fingerprints, named, open_file
from bus.cli_connection import redis_options, run_command
from bus.connection import translated
from bus.envelope import Envelope, deterministic_id, encode
from bus.errors import BusError
from bus.findings import IMPORTED_SOURCE
from bus.progress import Progress
from bus.settings import Settings

__all__ = ["ImportReport", "import_file", "import_findings", "parse_findings"]

MAX_LINE_BYTES: Final = 4 << 20
_BATCH: Final = 500
_CHUNK: Final = 1 << 20
MAX_BAD_SHOWN: Final = 100
"""Bad lines named one by one; the rest are counted (a file of millions of bad lines would otherwise be
held as as many messages until the end)."""


@dataclass
class ImportReport:
    published: int = 0
    skipped: int = 0
    """Lines published by an earlier run."""
    bad: list[str] = field(default_factory=list)
    """What was wrong with the first :data:`MAX_BAD_SHOWN` bad lines, each with its line number."""
    bad_lines: int = 0
    left_out: LeftOut = field(default_factory=LeftOut)
    """The fields of published lines that are no finding's."""
    unfinished: int | None = None
    """The number of a last line left for the next run: no newline ends it, and it is no JSON yet (its
    writer may be writing it). Not a bad line."""

    def bad_line(self, message: str) -> None:
        """One more bad line; its message is kept while fewer than :data:`MAX_BAD_SHOWN` are."""
        self.bad_lines += 1
        if len(self.bad) < MAX_BAD_SHOWN:
            self.bad.append(message)


@dataclass(frozen=True)
class _Import:
    path: Path
    agent_field: str
    default_agent: str | None
    on_batch: Callable[[int, int], None] | None


async def import_file(
    bus: AgentBus,
    path: Path,
    *,
    agent_field: str = "agent",
    default_agent: str | None = None,
    on_batch: Callable[[int, int], None] | None = None,
) -> ImportReport:
    """Import the complete lines of a findings JSONL file into ``bus``'s group, from the checkpoint.

    ``path`` names the file in the envelope ids and the checkpoint key: pass it
    :func:`~agents.watched_file.named`. ``on_batch`` is told the byte offset and line number reached after
    each batch published.
    """
    spec = _Import(path, agent_field, default_agent, on_batch)
    key = import_key(bus, spec.path)
    with translated():
        raw = await bus.client.get(key)
    try:
        checkpoint = Checkpoint.model_validate_json(raw) if raw is not None else Checkpoint()
    except ValidationError:
        bus.warn(f"checkpoint {key} is unreadable; importing {spec.path} again as a new generation")
        checkpoint = Checkpoint(generation=1)
    report = ImportReport()
    fd = open_file(spec.path, "a pipe cannot be imported resumably: use `subagent-bus findings add -`")
    try:
        if checkpoint.read and (
            os.fstat(fd).st_size < checkpoint.read
            or fingerprints(fd, checkpoint.read) != (checkpoint.head, checkpoint.tail)
        ):
            bus.warn(
                f"{spec.path} changed before the imported offset; importing it again as a new generation"
            )
            checkpoint = Checkpoint(generation=checkpoint.generation + 1)
        await _import_from(bus, spec, fd, key, checkpoint, report)
    finally:
        os.close(fd)
    return report


def import_key(bus: AgentBus, path: Path) -> str:
    """The checkpoint key of importing the file at ``path`` into the bus's group (one file may go into
    several groups of a shard)."""
    digest = hashlib.sha256(f"{bus.group_id}\n{path}".encode()).hexdigest()[:16]
    return bus.state_key(f"import:{digest}")


async def _import_from(
    bus: AgentBus, spec: _Import, fd: int, key: str, checkpoint: Checkpoint, report: ImportReport
) -> None:
    source = f"{IMPORTED_SOURCE}{spec.path}" + (f"#{checkpoint.generation}" if checkpoint.generation else "")
    offset, line = checkpoint.resume, checkpoint.resume_line  # the start of the next line
    read = checkpoint.read  # past ``offset`` only inside an over-long line, reported already
    # A last line published without its newline is not ended: the next run counts it again, and its
    # line feed, when it comes, ends it (rather than being an empty line of its own).
    report.skipped = line if offset and os.pread(fd, 1, offset - 1) != b"\n" else line - 1
    overlong = read > offset
    pending = b""
    batch: list[tuple[Envelope, bytes]] = []
    while chunk := os.pread(fd, _CHUNK, read):
        read += len(chunk)
        if overlong:
            end = chunk.find(b"\n")
            if end < 0:
                continue
            overlong, chunk = False, chunk[end + 1 :]
            offset, line = read - len(chunk), line + 1
        pending += chunk
        lines = pending.split(b"\n")
        pending = lines.pop()
        for text in lines:
            _line(bus, spec, source, text, offset, line, batch, report)
            offset += len(text) + 1
            line += 1
            if len(batch) >= _BATCH:
                await _commit(bus, spec, key, checkpoint, fd, (offset, offset, line), batch)
        if len(pending) > MAX_LINE_BYTES:
            report.bad_line(f"{spec.path}:{line}: longer than {MAX_LINE_BYTES} bytes; skipped")
            overlong, pending = True, b""
    if not overlong and pending.strip():
        try:
            orjson.loads(pending.removeprefix(codecs.BOM_UTF8) if offset == 0 else pending)
        except orjson.JSONDecodeError:
            report.unfinished = line
        else:
            _line(bus, spec, source, pending, offset, line, batch, report)
            offset += len(pending)
    await _commit(bus, spec, key, checkpoint, fd, (read if overlong else offset, offset, line), batch)


def _line(
    bus: AgentBus,
    spec: _Import,
    source: str,
    text: bytes,
    offset: int,
    line: int,
    batch: list[tuple[Envelope, bytes]],
    report: ImportReport,
) -> None:
    if offset == 0:
        text = text.removeprefix(codecs.BOM_UTF8)  # a mark Windows tools write: no content
    if not text.strip():
        return
    if len(text) > MAX_LINE_BYTES:  # one that ended within the chunk that took it over the limit
        report.bad_line(f"{spec.path}:{line}: longer than {MAX_LINE_BYTES} bytes; skipped")
        return
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        report.bad_line(f"{spec.path}:{line}: " + ("not UTF-8" if _not_utf8(text) else not_json(exc)))
        return
    ignored: list[str] = []
    try:
        agent = _agent_of(value, spec)
        if may_give_twice(text, value):  # as `findings add`, rather than take a duplicated key's last value
            twice = keys_given_twice(text.decode()).keys
            if twice:
                raise ValueError(twice_message(twice))
        if spec.agent_field != "agent" and isinstance(value, dict):  # it named the agent: not a field
            value = {name: item for name, item in value.items() if name != spec.agent_field}
        finding = finding_of(value, agent, ignored)
    except ValueError as exc:
        report.bad_line(f"{spec.path}:{line}: {exc}")
        return
    envelope = bus.envelope(
        finding, source=source, id=deterministic_id(agent, source, offset), agent_id=agent
    )
    data = encode(envelope)
    why = oversize(data)
    if why is not None:
        report.bad_line(f"{spec.path}:{line}: {why}")
        return
    batch.append((envelope, data))
    report.published += 1
    report.left_out.add(ignored)


def _not_utf8(text: bytes) -> bool:
    try:
        text.decode()
    except UnicodeDecodeError:
        return True
    return False


def _agent_of(value: Any, spec: _Import) -> str:
    """The agent a line is from: its agent field, else the default; ``ValueError`` when neither."""
    if not isinstance(value, dict):
        raise ValueError(f"not a JSON object but {type(value).__name__}")
    given = value.get(spec.agent_field)
    agent = given if isinstance(given, str) and given.strip() else spec.default_agent
    if agent is None and given is not None:
        raise ValueError(f"field {spec.agent_field!r} is not an agent id: {orjson.dumps(given).decode():.80}")
    if agent is None:
        raise ValueError(f"no {spec.agent_field!r} field and no default agent id")
    problem = id_problem(agent)
    if problem is not None:
        raise ValueError(f"agent id {agent!r:.80} {problem}")
    return agent


async def _commit(
    bus: AgentBus,
    spec: _Import,
    key: str,
    checkpoint: Checkpoint,
    fd: int,
    where: tuple[int, int, int],
    batch: list[tuple[Envelope, bytes]],
) -> None:
    """Publish ``batch`` with the checkpoint ``where``: (bytes read, start of the next line, its number)."""
    read, offset, line = where
    head, tail = fingerprints(fd, read)
    state = checkpoint.model_copy(
        update={"read": read, "resume": offset, "resume_line": line, "head": head, "tail": tail}
    )
    await bus.publish(
        [envelope for envelope, _ in batch],
        encoded=[data for _, data in batch],
        state={key: state.model_dump_json().encode()},
    )
    batch.clear()
    if spec.on_batch is not None:
        spec.on_batch(read, line)


@click.command("import-findings")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--group", "group_id", required=True, callback=check_id, help="The task group the findings belong to."
)
@click.option(
    "--agent-id-field", "agent_field", default="agent", show_default=True, help="Field naming the agent."
)
@click.option("--agent-id", "default_agent", callback=check_id, help="Agent id for lines without that field.")
@click.option(
    "--workdir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Verify each finding's file:line under this directory.",
)
@redis_options
def import_findings(
    settings: Settings,
    path: Path,
    group_id: str,
    agent_field: str,
    default_agent: str | None,
    workdir: Path | None,
) -> None:
    """Stream a findings JSONL file into the bus, resumably; bad lines are reported and skipped.

    Exit status 2 when some lines were bad.
    """

    async def main() -> ImportReport:
        # Retried while the server is away or refuses writes for now, but not for ever (see findings add)
        agent = default_agent or "findings-import"
        bus = await connect_bus(settings, agent, group_id, workdir=workdir, patience=settings.socket_timeout)
        try:
            absolute = await named(bus, path, lambda name: import_key(bus, name))
            size = max(1, absolute.stat().st_size)  # lines appended meanwhile are imported too: cap at 100%
            with Progress() as progress:

                def shown(offset: int, line: int) -> None:
                    done = min(100, 100 * offset // size)
                    progress.update(f"importing {path}: {done}% ({line - 1:,} lines)")

                return await import_file(
                    bus, absolute, agent_field=agent_field, default_agent=default_agent, on_batch=shown
                )
        except NotTaken as exc:
            raise BusError(
                f"{exc}; run the command again once the server takes writes: it goes on after the last "
                "batch the server took, and publishes nothing twice"
            ) from None
        finally:
            await bus.client.aclose()

    report = run_command(main(), also=(OSError, ValueError))
    _summary(report, click.echo)


def _summary(report: ImportReport, echo: Callable[..., None]) -> None:
    for message in report.bad:
        echo(message, err=True)
    if report.bad_lines > len(report.bad):
        echo(f"... and {report.bad_lines - len(report.bad)} more bad line(s)", err=True)
    if report.left_out:
        echo(report.left_out.note(), err=True)
    if report.unfinished is not None:
        echo(f"line {report.unfinished}: incomplete last line (no newline); left for the next run", err=True)
    echo(
        f"imported {report.published} finding(s); {report.bad_lines} bad line(s); "
        f"{report.skipped} line(s) imported before"
    )
    if report.bad_lines:
        raise SystemExit(EXIT_INVALID)
