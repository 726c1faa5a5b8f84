"""Commands of the agent side that work on text alone: parsing agent output, building a task prompt."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from typing import IO, Any, Final

import click

from agents.identity import build_prompt
from agents.items import TurnFailedItem
from agents.options import MAX_TASK_FILE_BYTES, check_id, format_option
from agents.parser import DEFAULT_MAX_BLOCK_BYTES, ErrorItem, Item, ResultItem, SignalItem
from agents.transcript import AnyParser, Format
from agents.whole_input import InputError, read_whole
from bus.display import counted, json_bytes, one_line
from bus.envelope import EnvelopeType
from bus.signals import ClarificationNeeded

__all__ = ["EXIT_ERRORS", "EXIT_OK", "EXIT_USAGE", "commands", "item_json", "item_summary", "parse", "prompt"]

EXIT_OK: Final = 0
EXIT_USAGE: Final = 1
EXIT_ERRORS: Final = 2
CHUNK_BYTES: Final = 64 * 1024

_KINDS: Final[dict[type[Item], str]] = {
    SignalItem: "signal",
    ResultItem: "result",
    ErrorItem: "error",
    TurnFailedItem: "failed turn",
}
"""What an item is counted as in the totals."""
# The fields shown for each signal in the readable summary.
_KEY_FIELDS: Final[dict[EnvelopeType, tuple[str, ...]]] = {
    EnvelopeType.CLARIFICATION_NEEDED: ("blocked_at",),
    EnvelopeType.STOP_WORK: ("stop_reason", "blocker_type"),
    EnvelopeType.DELEGATE_WORK: ("independence", "priority"),
    EnvelopeType.COMPLETION_REPORT: ("status",),
    EnvelopeType.PROGRESS: ("percent", "eta"),
}


class _Command(click.Command):
    """Usage errors exit with 1 (click's default is 2), so 2 always means "the output had errors"."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            exc.show()
            raise SystemExit(EXIT_USAGE) from None


def item_json(item: Item) -> dict[str, Any]:
    """The ``--json`` form of an item (one object per output line)."""
    if isinstance(item, SignalItem):
        return {
            "kind": "signal",
            "type": item.type.value,
            "agent_id": item.payload.agent_id,
            "payload": item.payload.model_dump(mode="json", exclude_none=True),
            "line": item.line,
            "offset": item.offset,
        }
    if isinstance(item, ResultItem):
        report = item.report.model_dump(mode="json", exclude_none=True)
        return {"kind": "result", **report, "line": item.line, "offset": item.offset}
    if isinstance(item, TurnFailedItem):
        return {"kind": "turn_failed", "line": item.line, "offset": item.offset, "message": item.message}
    error: dict[str, Any] = {
        "kind": "error",
        "line": item.line,
        "offset": item.offset,
        "message": item.message,
    }
    if item.type is not None:
        error["type"] = item.type.value
    return error


def _clip(value: object, width: int = 60) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def item_summary(item: Item) -> str:
    """One readable line: line number, type, agent and the fields that matter for the type (what the
    agent wrote escaped: no escape sequence of it reaches the terminal)."""
    return one_line(_summary(item))


def _summary(item: Item) -> str:
    if isinstance(item, ErrorItem):
        return f"{item.line:>6}  {'ERROR':<20} {item.message}"
    if isinstance(item, TurnFailedItem):
        return f"{item.line:>6}  {'TURN_FAILED':<20} {item.message}"
    if isinstance(item, SignalItem):
        payload = item.payload
        values = ((name, getattr(payload, name)) for name in _KEY_FIELDS[item.type])
        fields = [f"{name}={_clip(value)}" for name, value in values if value is not None]
        if isinstance(payload, ClarificationNeeded):
            fields.insert(0, f"questions={len(payload.questions)}")
        return f"{item.line:>6}  {item.type.value:<20} {_clip(payload.agent_id, 20):<20} {' '.join(fields)}"
    report = item.report
    fields = [f"status={report.status.value}"]
    if report.confidence is not None:
        fields.append(f"confidence={report.confidence.score:g}")
    fields += [f"findings={len(report.findings)}", f"issues={len(report.issues)}"]
    if report.violations:
        fields.append(f"violations={len(report.violations)}")
    return f"{item.line:>6}  {'RESULT':<20} {_clip(report.agent, 20):<20} {' '.join(fields)}"


@click.command("parse", cls=_Command)
@click.argument("path", required=False, default="-")
@format_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per item and line.")
@click.option(
    "--max-block-bytes",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_BLOCK_BYTES,
    show_default=True,
    help="Larger signal blocks and reports are reported as errors and skipped.",
)
def parse(path: str, fmt: str, as_json: bool, max_block_bytes: int) -> None:
    """Parse agent output from PATH (stdin without one, or with -) into signals, results and errors.

    The input is read as a stream, in bounded memory: a pipe's items are printed as they arrive, and a
    file is read to its end as it is then (`adapter watch` follows a file that grows). A block whose
    closing tag ends the input without a newline ends there.

    \b
    Exit status:
      0  the output parsed without any error item
      1  an error: a usage error (an unknown option, an unreadable file), or output
         that could not be written (stdout full or closed, or its reader gone: `| head`)
      2  the output holds at least one error item
    """
    if path == "-" and sys.stdin is None:  # started with it closed
        click.echo("Error: stdin is closed: give PATH, or pipe the output in", err=True)
        raise SystemExit(EXIT_USAGE)
    try:
        stream: IO[bytes] = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        click.echo(f"Error: cannot read {path}: {exc.strerror or exc}", err=True)
        raise SystemExit(EXIT_USAGE) from None
    parser = AnyParser(Format(fmt), max_block_bytes=max_block_bytes)
    out = sys.stdout.buffer
    counts: Counter[str] = Counter()
    read: Callable[[int], bytes] = getattr(stream, "read1", stream.read)  # read1: what a pipe has now
    with stream:
        while True:
            try:
                chunk = read(CHUNK_BYTES)
            except OSError as exc:
                click.echo(f"Error: cannot read {path}: {exc.strerror or exc}", err=True)
                raise SystemExit(EXIT_USAGE) from None
            items = parser.feed(chunk) if chunk else parser.close()
            _write(out, items, as_json, counts)
            if not chunk:
                break
    if not as_json:
        _write_totals(out, parser, counts)
    raise SystemExit(EXIT_ERRORS if counts["error"] else EXIT_OK)


def _write(out: IO[bytes], items: list[Item], as_json: bool, counts: Counter[str]) -> None:
    for item in items:
        counts[_KINDS[type(item)]] += 1
        line = _json_line(item) if as_json else item_summary(item).encode()
        out.write(line + b"\n")
    if items:
        out.flush()


def _json_line(item: Item) -> bytes:
    return json_bytes(item_json(item))


def _write_totals(out: IO[bytes], parser: AnyParser, counts: Counter[str]) -> None:
    if parser.format is Format.CODEX_JSONL and parser.session_id:
        out.write(f"codex exec output: thread {parser.session_id}\n".encode())
    elif parser.session_id or parser.agent_id:
        out.write(
            f"transcript: session {parser.session_id or '-'}, agent {parser.agent_id or '-'}\n".encode()
        )
    total = ", ".join(counted(counts[kind], kind) for kind in ("signal", "result", "error"))
    if counts["failed turn"]:  # said by the agent's program (a JSONL output), not the agent
        total += f", {counted(counts['failed turn'], 'failed turn')}"
    out.write(f"{total}\n".encode())
    out.flush()


@click.command("prompt")
@click.argument("taskfile", metavar="[TASKFILE|-]", required=False, default="-")
@click.option(
    "--agent-id", required=True, callback=check_id, help="The id the agent is told to use in its signals."
)
def prompt(taskfile: str, agent_id: str) -> None:
    """Print a task prompt with the identity statement, the signal templates (protocol 1) and the result
    report's template.

    The task is read from TASKFILE, or from stdin without one (or with -).
    """
    try:
        task = read_whole(taskfile, MAX_TASK_FILE_BYTES, what="the task").decode()
    except InputError as exc:
        raise click.BadParameter(str(exc), param_hint="TASKFILE") from None
    except UnicodeDecodeError as exc:
        raise click.BadParameter(
            f"{taskfile} is not UTF-8 (byte {exc.start})", param_hint="TASKFILE"
        ) from None
    if not task.strip():
        raise click.BadParameter("the task is empty", param_hint="TASKFILE")
    click.echo(build_prompt(task, agent_id), nl=False)


commands: list[click.Command] = [parse, prompt]
