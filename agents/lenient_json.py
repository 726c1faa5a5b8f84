"""JSON with lone surrogate escapes, as JavaScript writes it: read with U+FFFD in their place.

Node's ``JSON.stringify`` writes a string cut inside a UTF-16 character pair (an emoji cut to a length)
as a lone ``"\\ud83d"`` escape. That is valid JSON text, but names no character: orjson and pydantic
refuse the whole document for it. Claude Code's transcripts and MCP clients written in JavaScript send
such lines; losing a whole line (its signals, a tool call and its id) for one cut character is worse
than a replacement character.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

__all__ = ["loads_lenient", "not_json"]

_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def loads_lenient(data: bytes | str) -> Any:
    """``data`` as Python's JSON reads it, each lone surrogate replaced by U+FFFD; None when it is not
    JSON either way (the caller has the stricter parser's reason)."""
    try:
        # the replacement recurses as the parser does, two frames a level: a value nested within the
        # parser's limit may be beyond the interpreter's (a RecursionError: then it is no JSON here either)
        return _replaced(json.loads(data))
    except (ValueError, UnicodeDecodeError, RecursionError):  # json.JSONDecodeError is a ValueError
        return None


def _replaced(value: Any) -> Any:
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_replaced(item) for item in value]
    if isinstance(value, dict):
        return {_replaced(key): _replaced(item) for key, item in value.items()}
    return value


def not_json(exc: json.JSONDecodeError) -> str:
    """Why one line is not JSON, placed by its column: the decoder's own "line 1" and offset say nothing
    about a line of a file (orjson's errors are ``json.JSONDecodeError``s)."""
    what = str(exc).rsplit(": line ", 1)[0]
    return f"not JSON ({what} at column {exc.colno})"
