"""Delivering the coordinator's directives back to the agent.

An adapter follows its agent's inbox (``{ns:s}:inbox:<agent>``) in the consumer group ``adapter`` and
hands each directive's rendered resume prompt to the agent by one method:

- ``print``: the prompt on the adapter's stdout, then an end marker line;
- ``file:PATH``: the prompt and the end marker appended to a response file, fsynced. The marker names the
  directive's id, so a directive delivered again (after a crash between delivery and acknowledgement) is
  found in the file and not appended twice, and a piece of one that a killed adapter left is replaced;
- ``command:TEMPLATE``: a resume command such as ``claude --resume {session_id} -p {prompt}``. The
  template is split with shlex first, then the placeholders are replaced inside each argument, and the
  command is executed without a shell: a prompt holding ``; rm -rf /`` or quotes is one literal argument.

A directive is acknowledged only once delivered (:mod:`agents.inbox_follower`); a failed delivery is
retried after ``retry_ms``, and dead-lettered with the reason after ``max_attempts``, the parent told.
Delivery is at least once: a killed adapter redelivers what it had not acknowledged. An envelope that is
no directive for an agent (a launch request, a signal: only the coordinator writes inboxes) is
dead-lettered with that reason.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO, Final, Protocol

from agents.delivery_command import DeliveryFailed, run_checked
from bus import directives as d
from bus.envelope import Envelope, EnvelopeType
from bus.errors import BusError
from bus.keys import ConsumerGroup

__all__ = [
    "ABANDONED_MS",
    "GROUP",
    "HOLD_REFRESH_S",
    "PLACEHOLDERS",
    "AgentDone",
    "CommandDelivery",
    "Deliverer",
    "DeliveryFailed",
    "DeliveryKind",
    "DeliverySpec",
    "Directive",
    "FileDelivery",
    "PrintDelivery",
    "as_directive",
    "delivery_problem",
    "end_marker",
    "fill",
    "not_a_directive",
    "program_problem",
    "split_template",
    "write_all",
]

GROUP: Final = ConsumerGroup.ADAPTER.value
"""The consumer group (and consumer name) adapters read their inbox with."""
HOLD_REFRESH_S: Final = 10.0
"""While a delivery runs (a resume command, an agent's turn to end first), how often its entry is made
fresh again (:meth:`~bus.consumer.Consumer.hold`)."""
ABANDONED_MS: Final = 60_000
"""An entry an adapter has left that long is an adapter's that died: ``listen`` takes it over."""
PLACEHOLDERS: Final = frozenset({"prompt", "agent_id", "group_id", "session_id", "type", "directive_id"})
_PLACEHOLDER: Final = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_FORMATTED: Final = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?:[.!\[]|:(?!\s))")
"""``{agent_id!r}``, ``{prompt_file:>60}``; not a jq object (``{agent_id: .x}``)."""
# A known name after "{" that ends its argument or a word was meant as a placeholder: "{prompt" is a typo,
# while "{agent_id: 1}" (jq, JSON) is not.
_UNCLOSED: Final = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?=\s|$)")

_RENDERED = (
    d.ClarificationResponse,
    d.BlockerResolved,
    d.DelegationApproved,
    d.DelegationDenied,
    d.DelegationCompleted,
    d.ErrorRecovery,
)


class AgentDone(BusError):
    """The agent has completed: a directive that would start another turn of it is acknowledged, not
    delivered (it arrived after the completion report, e.g. the answer to a second delegation)."""

    def __init__(self, message: str = "the agent has completed; no turn is started for it") -> None:
        super().__init__(message)


@dataclass(frozen=True)
class Directive:
    """A directive for the agent and its rendered resume prompt."""

    envelope: Envelope
    prompt: str

    @property
    def type(self) -> EnvelopeType:
        return self.envelope.type


def as_directive(envelope: Envelope) -> Directive | None:
    """The directive in ``envelope``, or None for anything an agent is not to be given."""
    payload = envelope.payload
    if isinstance(payload, _RENDERED):
        return Directive(envelope, payload.render())
    return None


def not_a_directive(envelope: Envelope) -> str:
    """Why an envelope in an inbox is dead-lettered: no agent is to be given it (only the coordinator
    writes inboxes, so it came from some other writer)."""
    return f"{envelope.type.value} {envelope.id} is not a directive for an agent"


def end_marker(directive: Directive) -> str:
    """The line that follows a delivered prompt (and identifies it)."""
    return f"<!-- end of directive {directive.envelope.id} {directive.type.value} -->"


def _framed(directive: Directive) -> bytes:
    return f"{directive.prompt.rstrip()}\n{end_marker(directive)}\n\n".encode()


def split_template(template: str, allowed: frozenset[str] = PLACEHOLDERS) -> list[str]:
    """``template`` split like a shell would (no expansion); unknown or unclosed placeholders are an error."""
    try:
        argv = shlex.split(template)
    except ValueError as exc:
        raise ValueError(f"cannot split the command template: {exc}") from None
    if not argv:
        raise ValueError("the command template is empty")
    unknown = sorted({name for arg in argv for name in _PLACEHOLDER.findall(arg)} - allowed)
    if unknown:
        names = ", ".join(f"{{{n}}}" for n in unknown)
        known = ", ".join(f"{{{n}}}" for n in sorted(allowed))
        raise ValueError(f"unknown placeholder {names} in the command template (known: {known})")
    formatted = sorted({name for arg in argv for name in _FORMATTED.findall(arg)} & allowed)
    if formatted:  # Python's format syntax, which a value is never put through
        names = ", ".join(f"{{{n}...}}" for n in formatted)
        raise ValueError(
            f"{names} in the command template: a placeholder takes no attribute, index or format"
        )
    unclosed = sorted({name for arg in argv for name in _UNCLOSED.findall(arg)} & allowed)
    if unclosed:
        names = ", ".join(f"{{{n}" for n in unclosed)
        raise ValueError(f"unclosed placeholder {names} in the command template (missing '}}')")
    return argv


def program_problem(argv: list[str]) -> str | None:
    """Why the program of a split template cannot be started here, or None.

    Checked when a command starts: a resume command that cannot run fails every delivery, and an adapter
    that waits for its agent to complete would wait for ever once they are dead-lettered. A program
    given by a placeholder is only known per directive and is not checked.
    """
    program = argv[0]
    if _PLACEHOLDER.search(program) or shutil.which(program) is not None:
        return None
    if os.sep in program:
        return f"{program} is not an executable file"
    return f"{program!r} is not a program on PATH"


def delivery_problem(spec: DeliverySpec) -> str | None:
    """Why directives cannot be delivered by ``spec`` here, or None: its command's program (see
    :func:`program_problem`), or its response file: a directory, in a directory that does not exist, or
    no regular file."""
    if spec.kind is DeliveryKind.COMMAND:
        return program_problem(list(spec.argv))
    if spec.path is not None and spec.path.is_dir():
        return f"{spec.path} is a directory"
    if spec.path is not None and not spec.path.parent.is_dir():
        return f"the directory of {spec.path} does not exist"
    if spec.path is not None and spec.path.exists() and not spec.path.is_file():
        # each delivery reads the file back first, to append a directive once (after a kill) and whole
        return f"{spec.path} is not a regular file (a pipe, a socket or a device): it is read back"
    return None


def fill(argv: list[str], values: Mapping[str, str | None]) -> list[str]:
    """Each argument with its placeholders replaced, in one pass: a value is never scanned again.

    Raises ``KeyError`` naming a placeholder whose value is None (not known yet).
    """

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            return match.group(0)
        found = values[name]
        if found is None:
            raise KeyError(name)
        return found

    return [_PLACEHOLDER.sub(value, arg) for arg in argv]


class Deliverer(Protocol):
    name: str

    async def deliver(self, directive: Directive) -> None:
        """Hand the directive to the agent; raise :class:`DeliveryFailed` when that did not happen."""


def write_all(out: IO[bytes], data: bytes) -> None:
    """Write every byte of ``data`` to ``out`` and flush; ``OSError`` when that did not happen. A
    buffered stream's ``write`` returns a short count, without an error, when the reader of a pipe goes
    away in the middle of a large write: the rest is tried again, which then fails."""
    view = memoryview(data)
    while view:
        written = out.write(view)
        if not written:  # None: a non-blocking stream that took nothing
            raise OSError(f"{len(data) - len(view)} of {len(data)} bytes written")
        view = view[written:]
    out.flush()


class PrintDelivery:
    """The prompt on a byte stream (the adapter's stdout), then its end marker."""

    name = "print"

    def __init__(self, out: IO[bytes] | None = None) -> None:
        self.out = out if out is not None or sys.stdout is None else sys.stdout.buffer

    async def deliver(self, directive: Directive) -> None:
        try:
            if self.out is None:  # the adapter was started with its stdout closed (`>&-`)
                raise OSError("stdout is closed")
            write_all(self.out, _framed(directive))
        except (OSError, ValueError) as exc:
            raise DeliveryFailed(f"cannot print the prompt: {exc}") from None


class FileDelivery:
    """The prompt appended to a response file the agent reads (fsynced; never appended twice)."""

    name = "file"

    def __init__(self, path: Path) -> None:
        self.path = path

    async def deliver(self, directive: Directive) -> None:
        try:
            await asyncio.to_thread(self._append, directive)
        except OSError as exc:
            raise DeliveryFailed(f"cannot append to {self.path}: {exc.strerror or exc}") from None

    def _append(self, directive: Directive) -> None:
        created = not self.path.exists()
        framed = _framed(directive)
        with self.path.open("a+b") as stream:
            stream.seek(0)
            data = stream.read()
            if end_marker(directive).encode() in data:
                return  # delivered before the adapter could acknowledge it
            torn = _torn(data, framed)
            if torn:
                stream.truncate(len(data) - torn)
            stream.write(framed)
            stream.flush()
            os.fsync(stream.fileno())
        if created:
            _fsync_dir(self.path.parent)


_FRAME_END: Final = re.compile(rb"<!-- end of directive \S+ \S+ -->\n\n")


def _torn(data: bytes, framed: bytes) -> int:
    """How many bytes at the end of ``data`` are the start of ``framed``, left by an adapter killed while
    it appended them (a write of more than a page can stop halfway): they are taken back, so the reader
    finds the prompt once and whole, not a piece of it before it. 0 when the end is anything else."""
    ends = [match.end() for match in _FRAME_END.finditer(data)]
    tail = data[ends[-1] if ends else 0 :]
    return len(tail) if tail and framed.startswith(tail) else 0


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


Runner = Callable[[list[str], Directive], Awaitable[None]]
"""Runs a filled resume command (raising :class:`DeliveryFailed` when it cannot)."""


class CommandDelivery:
    """A resume command per directive, from a template; executed without a shell."""

    name = "command"

    def __init__(
        self,
        argv: list[str],
        values: Callable[[], Mapping[str, str | None]],
        runner: Runner | None = None,
        *,
        log: Callable[[str], None] = lambda _: None,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.argv = argv
        self.values = values
        self.runner = runner
        self.log = log
        self.warn = warn or log

    def command(self, directive: Directive) -> list[str]:
        values = {
            **self.values(),
            "prompt": directive.prompt,
            "type": directive.type.value,
            "directive_id": directive.envelope.id,
        }
        try:
            return fill(self.argv, values)
        except KeyError as exc:
            raise DeliveryFailed(f"placeholder {{{exc.args[0]}}} has no value yet") from None

    async def deliver(self, directive: Directive) -> None:
        argv = self.command(directive)
        if self.runner is not None:
            await self.runner(argv, directive)
        else:
            await run_checked(argv, self.log, self.warn)


class DeliveryKind(StrEnum):
    PRINT = "print"
    FILE = "file"
    COMMAND = "command"


@dataclass(frozen=True)
class DeliverySpec:
    """A parsed ``--deliver`` value: ``print``, ``file:PATH`` or ``command:TEMPLATE``."""

    kind: DeliveryKind
    path: Path | None = None
    argv: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> DeliverySpec:
        method, sep, rest = text.partition(":")
        if method == DeliveryKind.PRINT and not sep:
            return cls(DeliveryKind.PRINT)
        if method == DeliveryKind.FILE and rest.strip():
            return cls(DeliveryKind.FILE, path=Path(rest.strip()))
        if method == DeliveryKind.COMMAND and rest.strip():
            return cls(DeliveryKind.COMMAND, argv=tuple(split_template(rest)))
        raise ValueError(f"{text!r} is not print, file:PATH or command:'TEMPLATE'")
