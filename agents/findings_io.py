"""Findings into the bus: ``findings add`` for agents that shell out, and the import of a JSONL file.

Both publish FINDING envelopes onto the group's signals stream; the coordinator copies each into the
append-only findings stream exactly once.

- ``add`` takes one JSON object, a JSON array of objects, or JSON lines of :class:`~bus.findings.Finding`
  fields. Everything is validated before anything is published: one bad finding publishes none, and
  the messages name its line. An envelope's id hashes the agent and the finding's content, so running the
  same command again is recognised as a repeat.
- ``import-findings`` streams an existing JSONL file (the seed's shared ``SECURITY_FINDINGS.jsonl``).
  Ids derive from the file and each line's byte offset, and the read offset is checkpointed with every
  batch, so an interrupted or repeated import publishes each line once; lines appended later are
  imported by the next run. Bad lines are reported with their line numbers and skipped.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import click
import orjson
from pydantic import ValidationError

from agents.adapter import AgentBus, connect_bus, oversize
from agents.parser import describe_errors
from agents.watch import Checkpoint, fingerprints
from bus.connection import redis_options, run_command, translated
from bus.envelope import Envelope, deterministic_id, encode
from bus.findings import Finding
from bus.progress import Progress
from bus.settings import Settings

__all__ = ["MAX_INPUT_BYTES", "ImportReport", "add", "import_file", "import_findings", "parse_findings"]

MAX_INPUT_BYTES: Final = 64 << 20
"""``findings add`` refuses more input than this."""
MAX_LINE_BYTES: Final = 4 << 20
MAX_AGENT_ID: Final = 256
_BATCH: Final = 500
_CHUNK: Final = 1 << 20
EXIT_INVALID: Final = 2


def _finding(value: Any, agent: str) -> Finding:
    """A finding from one decoded JSON value; ``ValueError`` with a readable reason otherwise."""
    if not isinstance(value, dict):
        raise ValueError(f"not a JSON object but {type(value).__name__}")
    if not value.get("agent"):
        value = {**value, "agent": agent}
    try:
        return Finding.model_validate(value)
    except ValidationError as exc:
        raise ValueError(describe_errors(exc)) from None


def parse_findings(text: str, agent: str) -> tuple[list[Finding], list[str]]:
    """The findings in ``text`` (an object, an array, or JSON lines) and the errors, by line."""
    found, errors = _located_findings(text, agent)
    return [finding for _, finding in found], errors


def _located_findings(text: str, agent: str) -> tuple[list[tuple[str, Finding]], list[str]]:
    """:func:`parse_findings`, each finding with where it is in ``text`` (``finding 2``, ``line 3``)."""
    try:
        whole = orjson.loads(text)
    except orjson.JSONDecodeError:
        whole = None
    else:
        values = whole if isinstance(whole, list) else [whole]
        return _validated([(f"finding {i + 1}", value) for i, value in enumerate(values)], agent)
    found: list[tuple[str, Finding]] = []
    errors: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            found.append((f"line {number}", _finding(orjson.loads(line), agent)))
        except orjson.JSONDecodeError as exc:
            errors.append(f"line {number}: not JSON ({exc})")
        except ValueError as exc:
            errors.append(f"line {number}: {exc}")
    return found, errors


def _validated(pairs: list[tuple[str, Any]], agent: str) -> tuple[list[tuple[str, Finding]], list[str]]:
    found: list[tuple[str, Finding]] = []
    errors: list[str] = []
    for where, value in pairs:
        try:
            found.append((where, _finding(value, agent)))
        except ValueError as exc:
            errors.append(f"{where}: {exc}")
    return found, errors


def _content_id(agent_id: str, finding: Finding) -> str:
    canonical = orjson.dumps(finding.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)
    return deterministic_id(agent_id, f"finding:{hashlib.sha256(canonical).hexdigest()}", 0)


def _read_input(source: str) -> str:
    try:
        if source == "-":
            data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        elif source.lstrip().startswith(("{", "[")):
            data = source.encode()
        else:
            with open(source, "rb") as stream:
                data = stream.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"cannot read {source}: {exc.strerror or exc}") from None
    if len(data) > MAX_INPUT_BYTES:
        raise ValueError(f"the input is larger than {MAX_INPUT_BYTES} bytes")
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise ValueError(f"the input is not UTF-8 (byte {exc.start})") from None


def _fail(messages: list[str]) -> None:
    for message in messages:
        click.echo(f"Error: {message}", err=True)
    raise SystemExit(EXIT_INVALID)


@click.command("add")
@click.argument("source", metavar="[JSON|FILE|-]", required=False, default="-")
@click.option("--agent-id", required=True, help="The reporting agent (also the default 'agent' field).")
@click.option("--group", "group_id", required=True, help="The task group.")
@click.option(
    "--workdir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Verify each finding's file:line under this directory (sets 'verified').",
)
@redis_options
def add(settings: Settings, source: str, agent_id: str, group_id: str, workdir: Path | None) -> None:
    """Publish findings: a JSON object, a JSON array, or JSON lines of finding fields.

    SOURCE is the JSON itself, a file holding it, or - (the default) for stdin. Nothing is published
    unless every finding is valid (exit status 2 otherwise, with the line of each error).
    """
    try:
        text = _read_input(source)
    except ValueError as exc:
        _fail([str(exc)])
    found, errors = _located_findings(text, agent_id)
    if errors:
        _fail(errors)
    if not found:
        _fail(["no findings in the input"])

    async def main() -> list[str]:
        """The findings too large to publish; nothing is published unless there are none."""
        bus = await connect_bus(settings, agent_id, group_id, workdir=workdir)
        try:
            envelopes = [
                bus.envelope(f, source="findings-add", id=_content_id(agent_id, f)) for _, f in found
            ]
            # checked on the envelopes themselves: verification with --workdir changes their size
            datas = [encode(envelope) for envelope in envelopes]
            too_large = [
                f"{where}: {why}"
                for (where, _), data in zip(found, datas, strict=True)
                if (why := oversize(data)) is not None
            ]
            if not too_large:
                await bus.publish(envelopes, encoded=datas)
            return too_large
        finally:
            await bus.client.aclose()

    too_large = run_command(main(), also=(ValueError,))
    if too_large:
        _fail([*too_large, "nothing was published"])
    click.echo(f"published {len(found)} finding(s) of {agent_id} in group {group_id}")


@dataclass
class ImportReport:
    published: int = 0
    skipped: int = 0
    """Lines published by an earlier run."""
    bad: list[str] = field(default_factory=list)


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

    ``path`` names the file in the envelope ids and the checkpoint key: pass it absolute. ``on_batch``
    is told the byte offset and line number reached after each batch published.
    """
    spec = _Import(path, agent_field, default_agent, on_batch)
    key = bus.state_key(f"import:{hashlib.sha256(str(spec.path).encode()).hexdigest()[:16]}")
    with translated():
        raw = await bus.client.get(key)
    try:
        checkpoint = Checkpoint.model_validate_json(raw) if raw is not None else Checkpoint()
    except ValidationError:
        bus.log(f"checkpoint {key} is unreadable; importing {spec.path} again as a new generation")
        checkpoint = Checkpoint(generation=1)
    report = ImportReport()
    fd = os.open(spec.path, os.O_RDONLY)
    try:
        if checkpoint.read and (
            os.fstat(fd).st_size < checkpoint.read
            or fingerprints(fd, checkpoint.read) != (checkpoint.head, checkpoint.tail)
        ):
            bus.log(f"{spec.path} changed before the imported offset; importing it again as a new generation")
            checkpoint = Checkpoint(generation=checkpoint.generation + 1)
        await _import_from(bus, spec, fd, key, checkpoint, report)
    finally:
        os.close(fd)
    return report


async def _import_from(
    bus: AgentBus, spec: _Import, fd: int, key: str, checkpoint: Checkpoint, report: ImportReport
) -> None:
    source = f"findings:{spec.path}" + (f"#{checkpoint.generation}" if checkpoint.generation else "")
    offset, line = checkpoint.read, checkpoint.resume_line
    report.skipped = line - 1
    pending = b""
    batch: list[tuple[Envelope, bytes]] = []
    while chunk := os.pread(fd, _CHUNK, offset + len(pending)):
        pending += chunk
        lines = pending.split(b"\n")
        pending = lines.pop()
        for text in lines:
            _line(bus, spec, source, text, offset, line, batch, report)
            offset += len(text) + 1
            line += 1
            if len(batch) >= _BATCH:
                await _commit(bus, spec, key, checkpoint, fd, offset, line, batch)
        if len(pending) > MAX_LINE_BYTES:
            report.bad.append(f"{spec.path}:{line}: longer than {MAX_LINE_BYTES} bytes")
            break  # the lines before it are in the batch: still published and checkpointed below
    else:
        if pending.strip():
            try:
                orjson.loads(pending)
            except orjson.JSONDecodeError:
                report.bad.append(
                    f"{spec.path}:{line}: incomplete last line (no newline); left for the next run"
                )
            else:
                _line(bus, spec, source, pending, offset, line, batch, report)
                offset, line = offset + len(pending), line + 1
    await _commit(bus, spec, key, checkpoint, fd, offset, line, batch)


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
    if not text.strip():
        return
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        report.bad.append(f"{spec.path}:{line}: not JSON ({exc})")
        return
    try:
        agent = _agent_of(value, spec)
        finding = _finding(value, agent)
    except ValueError as exc:
        report.bad.append(f"{spec.path}:{line}: {exc}")
        return
    envelope = bus.envelope(
        finding, source=source, id=deterministic_id(agent, source, offset), agent_id=agent
    )
    data = encode(envelope)
    why = oversize(data)
    if why is not None:
        report.bad.append(f"{spec.path}:{line}: {why}")
        return
    batch.append((envelope, data))
    report.published += 1


def _agent_of(value: Any, spec: _Import) -> str:
    """The agent a line is from: its agent field, else the default; ``ValueError`` when neither."""
    agent = value.get(spec.agent_field) if isinstance(value, dict) else None
    agent = agent if isinstance(agent, str) and agent.strip() else spec.default_agent
    if agent is None:
        raise ValueError(f"no {spec.agent_field!r} field and no default agent id")
    if len(agent) > MAX_AGENT_ID:
        raise ValueError(f"agent id longer than {MAX_AGENT_ID} characters")
    return agent


async def _commit(
    bus: AgentBus,
    spec: _Import,
    key: str,
    checkpoint: Checkpoint,
    fd: int,
    offset: int,
    line: int,
    batch: list[tuple[Envelope, bytes]],
) -> None:
    head, tail = fingerprints(fd, offset)
    state = checkpoint.model_copy(
        update={"read": offset, "resume": offset, "resume_line": line, "head": head, "tail": tail}
    )
    await bus.publish(
        [envelope for envelope, _ in batch],
        encoded=[data for _, data in batch],
        state={key: state.model_dump_json().encode()},
    )
    batch.clear()
    if spec.on_batch is not None:
        spec.on_batch(offset, line)


@click.command("import-findings")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--group", "group_id", required=True, help="The task group the findings belong to.")
@click.option(
    "--agent-id-field", "agent_field", default="agent", show_default=True, help="Field naming the agent."
)
@click.option("--agent-id", "default_agent", help="Agent id for lines without that field.")
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

    absolute = path.absolute()

    async def main() -> ImportReport:
        bus = await connect_bus(settings, default_agent or "findings-import", group_id, workdir=workdir)
        try:
            size = max(1, absolute.stat().st_size)  # lines appended meanwhile are imported too: cap at 100%
            with Progress() as progress:

                def shown(offset: int, line: int) -> None:
                    done = min(100, 100 * offset // size)
                    progress.update(f"importing {path}: {done}% ({line - 1:,} lines)")

                return await import_file(
                    bus, absolute, agent_field=agent_field, default_agent=default_agent, on_batch=shown
                )
        finally:
            await bus.client.aclose()

    report = run_command(main(), also=(OSError, ValueError))
    _summary(report, click.echo)


def _summary(report: ImportReport, echo: Callable[..., None]) -> None:
    for message in report.bad:
        echo(message, err=True)
    echo(
        f"imported {report.published} finding(s); {len(report.bad)} bad line(s); "
        f"{report.skipped} line(s) imported before"
    )
    if report.bad:
        raise SystemExit(EXIT_INVALID)
