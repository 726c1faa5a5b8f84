"""How entries and texts read from the streams are shown to people: one line each, and nothing an agent
or another publisher wrote (a newline, an escape sequence) reaches the terminal as it is."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

import orjson
import pydantic_core

from bus.envelope import decode
from bus.errors import DecodeError
from bus.quoting import cut, quoted

if TYPE_CHECKING:
    from bus.tail import Item

__all__ = [
    "counted",
    "cut",
    "field_names",
    "first_line",
    "format_item",
    "has_control",
    "json_bytes",
    "one_line",
    "quoted",
    "unshown",
]

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_UNSHOWN = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f"
    r"\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
    r"\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]"
)
"""Control characters, Unicode's format characters (category Cf: the bidirectional controls, with which a
text can make a terminal show the rest of its line in another order than it has, ``\u202e`` reverses it;
zero-width spaces and joiners, a BOM, tag characters: text that shows nothing) and its line and paragraph
separators (Zl, Zp), at which some tools break a line."""


def format_item(item: Item, *, as_json: bool, dead: bool) -> tuple[bytes | str | None, str | None]:
    """(stdout line, stderr warning) for one entry; a line only for an envelope or a dead letter."""
    raw = item.fields.get(b"data")
    if dead:
        return _dead_line(item, raw, as_json=as_json), None
    try:
        envelope = decode(raw)
    except DecodeError as exc:
        return None, one_line(f"skipped entry {item.entry_id} of shard {item.shard}: {exc}")
    if as_json and raw is not None:
        # JSON may have line breaks between its tokens, and nowhere else (a string holds them escaped):
        # made spaces, the line is the same JSON, its numbers as written (1e400, a 100-digit integer)
        return raw.replace(b"\r", b" ").replace(b"\n", b" "), None
    payload = json_bytes(envelope.payload.model_dump(mode="json", exclude_none=True)).decode()
    text = (
        f"{envelope.ts.isoformat()} s{item.shard} {item.entry_id} "
        f"{envelope.kind.value}/{envelope.type.value} "
        f"{one_line(envelope.agent_id)}@{one_line(envelope.group_id)} {cut(payload, 160)}"
    )
    return text, None


def _dead_line(item: Item, raw: bytes | None, *, as_json: bool) -> bytes | str:
    info = {
        key.decode(errors="replace"): value.decode(errors="replace") for key, value in item.fields.items()
    }
    info.pop("data", None)
    if as_json:
        exact: dict[str, object] = {}
        try:
            data: object = orjson.loads(raw) if raw is not None else None
            # orjson reads JSON nested deeper than it, or pydantic, writes: text then (checked one level
            # down, where the line's object holds it)
            json_bytes([data])
            if raw is not None:  # as stored, on one line: a number orjson reads as a float stays exact
                data = orjson.Fragment(raw.replace(b"\r", b" ").replace(b"\n", b" "))
        except (orjson.JSONDecodeError, pydantic_core.PydanticSerializationError):
            assert raw is not None
            data = raw.decode(errors="replace")
            if data.encode() != raw:  # no UTF-8: the text shows it, the bytes are in base64
                exact["data_base64"] = base64.b64encode(raw).decode()
        shown: dict[str, object] = {
            "dead_id": item.entry_id,
            "shard": item.shard,
            **info,
            "data": data,
            **exact,
        }
        deliveries = info.get("deliveries", "")
        # a count, as a number (the stream keeps text); one of 19 digits or more (no coordinator's) as
        # text: orjson refuses one beyond 64 bits, pydantic the data's Fragment, int() over 4 300 digits
        if deliveries.isascii() and deliveries.isdigit() and len(deliveries) < 19:
            shown["deliveries"] = int(deliveries)
        return json_bytes(shown)
    where = f"{info.get('stream', '?')} {info.get('entry_id', '?')}"
    return one_line(
        f"s{item.shard} {item.entry_id} dead from {where} after {info.get('deliveries', '?')} deliveries: "
        f"{info.get('reason', '?')}"
    )


def json_bytes(value: object, *, indent: bool = False) -> bytes:
    """``value`` as JSON, by orjson; by pydantic where orjson refuses: an integer beyond 64 bits, which a
    signal's extra field can hold (a view that crashed on one entry would show no entry after it)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2 if indent else None)
    except orjson.JSONEncodeError:
        return pydantic_core.to_json(value, indent=2 if indent else None)


def first_line(text: str) -> str:
    """The first line of ``text`` that is not blank, stripped (``""`` when there is none)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def has_control(text: str) -> bool:
    """Whether ``text`` holds a control character (C0, DEL or C1): what :func:`one_line` escapes."""
    return _CONTROL.search(text) is not None


def unshown(text: str) -> str | None:
    """The first character of ``text`` that :func:`one_line` escapes (a control, format or separator
    character: one that shows nothing, or breaks a line), if any."""
    found = _UNSHOWN.search(text)
    return found.group() if found is not None else None


def one_line(text: str) -> str:
    """Text from the stream as one line: control characters (and bidirectional ones) escaped, none
    reaches the terminal."""
    return _UNSHOWN.sub(lambda m: repr(m.group())[1:-1], text)


def field_names(names: Iterable[bytes | str]) -> str:
    """A stream entry's field names for a dead letter's reason, sorted, on one line: a publisher may
    name a field with any bytes, and those that are no UTF-8 are escaped."""
    texts = (name.decode(errors="backslashreplace") if isinstance(name, bytes) else name for name in names)
    return ", ".join(sorted(one_line(text) for text in texts))


def counted(count: int, noun: str) -> str:
    """``1 finding``, ``2 findings``: a count and its noun (a regular plural)."""
    return f"{count} {noun}{'' if count == 1 else 's'}"
