"""The body of a signal block: from its bytes to the payload model, or the reason it is refused.

The body is YAML (JSON is YAML too). Two shapes agents print around it are taken off first: a code fence
that wraps the whole body (```` ```yaml ```` inside the tags), and the seed's JSON form of a signal
(``{"signal_type": ..., "agent_id": ..., "timestamp": ..., "payload": {fields}}``), whose payload holds
the fields.
"""

from __future__ import annotations

import re
from typing import Any, Final

from pydantic import ValidationError

from agents import yamlsafe
from bus import signals as s
from bus.envelope import EnvelopeType
from bus.errors import ProtocolError

__all__ = [
    "SIGNAL_MODELS",
    "SIGNAL_TYPES",
    "BlockError",
    "SignalPayload",
    "decode_body",
    "describe_errors",
    "is_template",
    "without_escapes",
]

SignalPayload = s.ClarificationNeeded | s.StopWork | s.DelegateWork | s.CompletionReport | s.Progress
SIGNAL_MODELS: Final[dict[EnvelopeType, type[SignalPayload]]] = {
    EnvelopeType.CLARIFICATION_NEEDED: s.ClarificationNeeded,
    EnvelopeType.STOP_WORK: s.StopWork,
    EnvelopeType.DELEGATE_WORK: s.DelegateWork,
    EnvelopeType.COMPLETION_REPORT: s.CompletionReport,
    EnvelopeType.PROGRESS: s.Progress,
}
SIGNAL_TYPES: Final = tuple(SIGNAL_MODELS)
"""The signal blocks the parser recognises."""


TERMINAL_ESCAPE: Final = rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)|\x1b[ -/]*[0-Z\\^-~]"
"""One terminal escape sequence: CSI (colour, cursor moves, erasing), OSC (a title, a link) or any other
escape (``\x1b(B`` of ``tput sgr0``, a saved cursor ``\x1b7``); never across a line."""
_ESCAPES: Final = re.compile(TERMINAL_ESCAPE)


def without_escapes(data: bytes) -> bytes:
    """``data`` without its terminal escape sequences. An agent whose output goes through a terminal, or
    that colours it anyway (syntax-highlighted YAML, a bold heading), puts them inside a body or a report
    too: they only style it, and YAML refuses the escape character anywhere, so taking them off changes
    the meaning of no body that reads as it is. Line numbers stay the same: none holds a newline."""
    return _ESCAPES.sub(b"", data) if b"\x1b" in data else data


# A template's fields hold placeholders (``agent_id: <agent-id>``); a signal's agent id and timestamp are
# the first things an agent fills in.
_PLACEHOLDER: Final = re.compile(rb"(?m)^[ \t]*(agent_id|timestamp):[ \t]*<[^<>\n]*>[ \t]*\r?$")


def is_template(body: bytes) -> bool:
    """Whether a block's body is a signal template (its agent id and timestamp both ``<placeholders>``,
    as in the prompt's and the seeds' formats): quoted or echoed by an agent, not a signal it sends."""
    return len({m.group(1) for m in _PLACEHOLDER.finditer(without_escapes(body))}) == 2


class BlockError(ProtocolError):
    """Why a block's body is refused (``message`` names the field or the line)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def decode_body(kind: EnvelopeType, body: bytes, *, indent: int = 0, first_line: int = 1) -> SignalPayload:
    """Validate the body of a ``kind`` block (the bytes between its tags) into its payload model.

    ``indent`` is the opening tag's indentation, removed from every line (at most that much
    whitespace); ``first_line`` is the number of the body's first line, used in messages. Terminal
    escape sequences are taken off (see :func:`without_escapes`).
    """
    body = without_escapes(body)
    try:
        text = body.decode()
    except UnicodeDecodeError as exc:
        line = first_line + body.count(b"\n", 0, exc.start)
        raise BlockError(f"invalid UTF-8 at line {line}") from None
    if "\r" in text:
        text = _lf_lines(text) if " \r" in text else text.replace("\r\n", "\n")
    if indent:
        text = re.sub(rf"(?m)^[ \t]{{1,{indent}}}", "", text)
    text = _unfenced(text)
    try:
        data = yamlsafe.load(text)
    except yamlsafe.YamlError as exc:
        data = _rescued(text)
        if data is None:
            at = f" at line {first_line - 1 + exc.line}" if exc.line is not None else ""
            within = (
                f" ({exc.within[0]} that starts at line {first_line - 1 + exc.within[1]})"
                if exc.within
                else ""
            )
            raise BlockError(
                f"invalid YAML{at}: {exc.message}{within}{_tabbed(text, exc.line, first_line)}"
            ) from None
    if not isinstance(data, dict):
        raise BlockError(f"the body must be a YAML mapping of fields, not {_kind(data)}")
    data = _unwrapped(kind, data)
    try:
        # what ``model_validate`` runs, without its wrapper: the payload is validated once, here
        payload: SignalPayload = SIGNAL_MODELS[kind].__pydantic_validator__.validate_python(data)
    except ValidationError as exc:
        raise BlockError(describe_errors(exc)) from None
    return payload


# A fence line: its marker (a run of backticks or of tildes) and, on an opening one, an info string.
_FENCE: Final = re.compile(r"[ \t]*(`{3,}|~{3,})([^`\n]*)")


def _unfenced(text: str) -> str:
    """``text`` without a code fence around the whole of it (its first and last lines that are not
    blank), which are left empty so that line numbers stay those of the output. A fence line is never
    valid YAML at the start of a mapping, so no body that reads as one changes meaning."""
    head = len(text) - len(text.lstrip())
    if text[head : head + 3] not in ("```", "~~~"):
        return text
    head = text.rfind("\n", 0, head) + 1
    head_end = text.find("\n", head)
    last_end = len(text.rstrip())
    last = text.rfind("\n", 0, last_end) + 1
    if head_end < 0 or last <= head_end:
        return text  # one line: nothing inside a fence
    opening = _FENCE.fullmatch(text, head, head_end)
    closing = _FENCE.fullmatch(text, last, last_end)
    if (
        opening is None
        or closing is None
        or closing.group(2).strip()
        or closing.group(1)[0] != opening.group(1)[0]
        or len(closing.group(1)) < len(opening.group(1))
    ):
        return text
    return text[:head] + text[head_end:last] + text[last_end:]


# The seed's JSON form of a signal (its appendix): the fields are the payload's, beside the signal type.
_JSON_FORM: Final = frozenset({"signal_type", "agent_id", "timestamp", "payload"})


def _unwrapped(kind: EnvelopeType, data: dict[Any, Any]) -> dict[Any, Any]:
    """The fields of a body in the seed's JSON form (a ``signal_type``, a ``payload`` and at most an
    ``agent_id`` and a ``timestamp`` beside them); any other body as it is. Every signal needs a field
    of its own beside those, so no body that is a signal as it is has this shape."""
    if "signal_type" not in data or "payload" not in data or not data.keys() <= _JSON_FORM:
        return data
    named, payload = data["signal_type"], data["payload"]
    if not isinstance(named, str) or named.strip().strip("[]").upper() != kind.value:
        raise BlockError(f"field 'signal_type': {str(named)!r:.60} in a [{kind.value}] block")
    if not isinstance(payload, dict):
        what = "null" if payload is None else _kind(payload)
        raise BlockError(f"field 'payload': the signal's fields must be a mapping, not {what}")
    fields = {name: data[name] for name in ("agent_id", "timestamp") if name in data}
    for name, value in fields.items():
        if payload.get(name, value) != value:
            raise BlockError(f"field 'payload.{name}': differs from the {name} beside the payload")
    return fields | payload


# A field written as prose, ``details: The database is unreachable: connection refused``, is what agents
# write most, and YAML refuses it (a second ": " in a plain scalar). Such a value is quoted, and the body
# read again; valid YAML is never read this way, so no valid body changes meaning. The key is matched
# by a regular expression, the value looked at with string methods: an expression over the value tried
# each space of a long run again, from each position (a line of 40 000 spaces took 20 s).
_PROSE_KEY: Final = re.compile(r"[ \t]*(?:- )?[A-Za-z_][\w-]*:[ \t]+(?=[^'\"\[\]{}|>&*!#%@`\s])")


def _lf_lines(text: str) -> str:
    """The text with each CRLF made an LF, and the spaces before it taken off: invisible, and the parser's
    for a CR before it (``\\r\\r\\n``). Line by line, in linear time: a regular expression such as
    ``" *\\r\\n"`` tries each space of a long run again, and a body of a megabyte of spaces took minutes."""
    *ended, last = text.split("\r\n")
    return "".join(part.rstrip(" ") + "\n" for part in ended) + last


def _rescued(text: str) -> Any:
    """The body with its prose fields quoted, or its tab indentation made spaces (see :func:`_detabbed`),
    or both, when that makes it valid YAML; None otherwise. The text of a block scalar (``details: |``)
    is left as it is: a second ": " or a tab in it is text, which YAML takes as it is."""
    lines = text.split("\n")
    literal = _literal_indents(lines)
    quoted = "\n".join(
        line if inside is not None else _prose_quoted(line)
        for line, inside in zip(lines, literal, strict=True)
    )
    spaced = _detabbed(text, literal)
    for again in dict.fromkeys((quoted, spaced, _detabbed(quoted, literal))):
        if again != text:
            try:
                return yamlsafe.load(again)
            except yamlsafe.YamlError:
                pass
    return None


def _prose_quoted(line: str) -> str:
    """``line`` with its value quoted when it is a field whose value holds ": " (or ends with ":"); the
    spaces after the value, and a CR, are left out."""
    key = _PROSE_KEY.match(line)
    if key is None:
        return line
    value = line[key.end() :].removesuffix("\r").rstrip(" \t")
    rest = value[1:]  # a value that starts with ": " is no prose written as a field, but YAML's error
    if ": " not in rest and ":\t" not in rest and not rest.endswith(":"):
        return line
    return f"{key.group()}'{value.replace(chr(39), chr(39) * 2)}'"


# A block scalar's header (``details: |``, ``- >-``, its indicators and a comment): its text is the lines
# after it that are blank or indented deeper than its key (or its dash).
_BLOCK_HEADER: Final = re.compile(
    r"([ \t]*)((?:-[ \t]+)*)([^\s'\"#|>:-][^:\n]*:[ \t]+)?[|>][-+1-9]*[ \t]*(?:#.*)?"
)


def _width(whitespace: str) -> int:
    return len(whitespace.expandtabs(8))


def _literal_indents(lines: list[str]) -> list[str | None]:
    """For each line, the indentation of the block scalar's text it is a line of (that of its first line
    that is not blank), or None for a line of no block scalar."""
    indents: list[str | None] = [None] * len(lines)
    at = 0
    while at < len(lines):
        header = _BLOCK_HEADER.fullmatch(lines[at].removesuffix("\r"))
        at += 1
        if header is None:
            continue
        indent, dashes, key = header.groups()
        parent = _width(indent + (dashes if key else dashes[: dashes.rstrip(" \t").rfind("-")]))
        start, own = at, None
        while at < len(lines):
            line = lines[at]
            body = line.lstrip(" \t")
            if body.strip():
                if _width(line[: len(line) - len(body)]) <= parent:
                    break
                own = line[: len(line) - len(body)] if own is None else own
            at += 1
        indents[start:at] = [own or ""] * (at - start)
    return indents


# The whitespace a line starts with, when it holds a tab.
_TABBED: Final = re.compile(r" *\t[ \t]*")


def _detabbed(text: str, literal: list[str | None]) -> str:
    """The body with the tabs of each line's indentation made spaces, to the next multiple of 8 columns,
    as a terminal or an editor shows them. YAML refuses a tab there, yet a body indented with tabs (one
    pasted from an editor, or typed) shows the structure it means; read as shown, it reads as meant. In
    the text of a block scalar (``literal``, see :func:`_literal_indents`) only the block's indentation
    is: a tab after it is the text's (a Makefile's)."""
    if "\t" not in text:
        return text
    lines = text.split("\n")
    for n, (line, own) in enumerate(zip(lines, literal, strict=True)):
        if own and line.startswith(own):
            lines[n] = own.expandtabs(8) + line[len(own) :]
        elif (tabbed := _TABBED.match(line)) is not None:
            lines[n] = tabbed.group().expandtabs(8) + line[tabbed.end() :]
    return "\n".join(lines)


def _tabbed(text: str, line: int | None, first_line: int) -> str:
    """A hint for a body that is no YAML, even read as shown, when YAML's error is at a line indented
    with a tab (``line``, 1-based in ``text``). A tab elsewhere is none of the trouble: in a literal
    block's text, after its indentation, YAML takes it as it is."""
    if line is None or line < 1:
        return ""
    lines = text.split("\n", line)
    if len(lines) < line or _TABBED.match(lines[line - 1]) is None:
        return ""
    return f" (line {first_line - 1 + line} is indented with a tab, which YAML refuses)"


def describe_errors(exc: ValidationError, limit: int = 3) -> str:
    """``field 'questions[0].text': Field required; ...`` for the first ``limit`` errors."""
    parts = []
    for err in exc.errors()[:limit]:
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]).lstrip(".")
        message = err["msg"].removeprefix("Value error, ")  # a model's own check: its message says it all
        parts.append(f"field '{loc}': {message}" if loc else message)
    more = exc.error_count() - limit
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def _kind(value: object) -> str:
    if value is None:
        return "an empty body"
    return "a list" if isinstance(value, list) else f"a scalar ({value!r:.40})"
