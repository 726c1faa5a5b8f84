"""The answer to a line of ``subagent-bus mcp``'s stdin that the MCP SDK would not take as a JSON-RPC
message, or would take wrongly: the errors :class:`agents.mcp_stdio.ScreenedLines` sends instead of
passing the line on.

:func:`rejection` validates a line with the SDK's own validator (:data:`mcp_types.jsonrpc_message_adapter`),
so it refuses exactly the lines the SDK does not take, and answers them as JSON-RPC 2.0 says: ``-32700``
(parse error, id null) for what is not JSON, ``-32600`` (invalid request) for JSON that is not a message,
with the message's id when it has a valid one, and ``-32602`` (invalid params) for a request whose
parameters its method does not take (the SDK says only "Invalid request parameters"). The messages say
what is wrong (the position of a JSON error, the members a message lacks, the parameter and what it should
be).

A line with a lone surrogate escape (``"\ud83d"``, a JavaScript string cut inside a character pair) is
invalid JSON to the SDK; :func:`surrogates_mended` gives it with U+FFFD in its place. :func:`keys_twice`
answers a message that gives a key twice in one object, and :func:`overlong_error` a line too long to be
read.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

import mcp_types as types
from pydantic import ValidationError
from pydantic_core import from_json

from agents.json_keys import keys_given_twice, twice_message
from agents.lenient_json import loads_lenient

__all__ = [
    "is_notification",
    "is_response",
    "jsonrpc_error",
    "keys_twice",
    "message_id",
    "overlong_error",
    "rejection",
    "surrogates_mended",
]

_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_MEMBERS: Final = {
    "JSONRPCRequest": "request",
    "JSONRPCNotification": "notification",
    "JSONRPCResponse": "response",
    "JSONRPCError": "error response",
}


def rejection(line: str) -> types.JSONRPCError | None:
    """The error that answers ``line``, or None when the SDK takes it as a JSON-RPC message."""
    try:
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        if first["type"] == "json_invalid":
            return _parse_error(str(first["msg"]).removeprefix("Invalid JSON: "))
        return _invalid_request(line, exc)
    # A request whose id is no string or integer passes as a notification (its id ignored), which gets
    # no answer: its sender would wait for ever.
    if isinstance(message, types.JSONRPCNotification) and "id" in from_json(line):
        return jsonrpc_error(types.INVALID_REQUEST, 'Invalid Request: "id" must be a string or an integer')
    if isinstance(message, types.JSONRPCRequest):
        return _invalid_params(message)
    return None


def _invalid_params(request: types.JSONRPCRequest) -> types.JSONRPCError | None:
    """``-32602`` saying which parameter is wrong, for a request of a method the SDK knows (it answers
    "Invalid request parameters" and nothing more); None for valid ones and unknown methods."""
    call = (
        {"method": request.method}
        if request.params is None
        else {"method": request.method, "params": request.params}
    )
    try:
        types.client_request_adapter.validate_python(call, by_name=False)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        # the union's errors come per kind of request; the one this is has no error on its method
        wrong_method = {e["loc"][0] for e in errors if e["loc"][1:2] == ("method",)}
        kinds = {e["loc"][0] for e in errors} - wrong_method
        if len(kinds) != 1:
            return None  # an unknown method: the SDK says so
        kind = kinds.pop()
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}" for e in errors if e["loc"][0] == kind
        )
        return jsonrpc_error(types.INVALID_PARAMS, f"Invalid params: {problems}", request.id)
    return None


def surrogates_mended(line: str) -> str | None:
    """``line`` with its lone surrogate escapes as U+FFFD (:mod:`agents.lenient_json`); None when it has
    none, or is not JSON even so."""
    if _SURROGATE_ESCAPE.search(line) is None:
        return None
    value = loads_lenient(line)
    return None if value is None else json.dumps(value, ensure_ascii=False)


def overlong_error(limit: int) -> types.JSONRPCError:
    """The answer to a line over ``limit`` bytes (which was not read, so its id is unknown)."""
    return jsonrpc_error(
        types.INVALID_REQUEST,
        f"Invalid Request: the line is longer than the {limit}-byte limit; it was discarded up to its "
        "newline",
    )


def jsonrpc_error(code: int, message: str, id: types.RequestId | None = None) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=id, error=types.ErrorData(code=code, message=message))


def _parse_error(detail: str) -> types.JSONRPCError:
    if "recursion limit" in detail:
        return jsonrpc_error(
            types.PARSE_ERROR,
            f"Parse error: arrays and objects nested too deeply for the JSON parser ({detail}); "
            "send a flatter message",
        )
    return jsonrpc_error(types.PARSE_ERROR, f"Parse error: not valid JSON: {detail}")


def _invalid_request(line: str, exc: ValidationError) -> types.JSONRPCError:
    try:
        value = from_json(line)
    except ValueError:  # the validator parsed it, so this parse does too
        value = None
    if isinstance(value, dict):
        return jsonrpc_error(
            types.INVALID_REQUEST, f"Invalid Request: {_describe(value, exc)}", message_id(value)
        )
    if isinstance(value, list):
        detail = "a batch (JSON array) is not supported: send one JSON-RPC message per line"
    else:
        detail = f"a JSON-RPC message is a JSON object, not {_kind(value)}"
    return jsonrpc_error(types.INVALID_REQUEST, f"Invalid Request: {detail}")


def _describe(message: dict[str, Any], exc: ValidationError) -> str:
    """What is wrong with ``message``, as the kind of message it looks like."""
    if "method" not in message and "error" in message:
        member = "JSONRPCError"
    elif "method" not in message and "result" in message:
        member = "JSONRPCResponse"
    else:
        member = "JSONRPCRequest" if "id" in message else "JSONRPCNotification"
    errors = [e for e in exc.errors(include_url=False) if e["loc"][:1] == (member,)]
    problems: dict[str, str] = {}
    for err in errors or exc.errors(include_url=False)[:1]:
        where = ".".join(str(part) for part in err["loc"][1:]) or "message"
        if err["loc"][1:2] == ("id",) and err["type"] != "missing":  # one error per type of the union
            problems.setdefault("id", '"id" must be a string or an integer')
        elif err["type"] == "missing":
            problems.setdefault(where, f'"{where}" is missing')
        else:
            problems.setdefault(where, f'"{where}": {err["msg"]}')
    return f"not a JSON-RPC {_MEMBERS[member]}: {'; '.join(list(problems.values())[:3])}"


def keys_twice(line: str) -> types.JSONRPCError | None:
    """``-32600`` naming the keys ``line`` (a JSON-RPC message) gives more than once in one object, at
    any depth; None when it gives each once. The SDK would take the last value of each: no client that
    sends objects writes such a line, and of one written by hand neither value can be said to be meant,
    so it is refused, as ``findings add`` refuses such a finding."""
    twice = keys_given_twice(line)
    if not twice.keys:
        return None
    return jsonrpc_error(
        types.INVALID_REQUEST,
        f"Invalid Request: {twice_message(twice.keys)}",
        None if "id" in twice.outermost else message_id(from_json(line)),
    )


def is_notification(line: str) -> bool:
    """Whether ``line`` is a JSON object with a ``method`` and no ``id``."""
    try:
        message = from_json(line)
    except ValueError:
        return False
    return isinstance(message, dict) and "method" in message and "id" not in message


def is_response(line: str) -> bool:
    """Whether ``line`` is meant as a response (a JSON object with ``result`` or ``error``, no ``method``)."""
    try:
        message = from_json(line)
    except ValueError:
        return False
    return (
        isinstance(message, dict) and "method" not in message and ("result" in message or "error" in message)
    )


def message_id(message: dict[str, Any]) -> types.RequestId | None:
    """The message's id, when it is one JSON-RPC allows (a string or an integer)."""
    value = message.get("id")
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return None


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a string" if isinstance(value, str) else "a number"
