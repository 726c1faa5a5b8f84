"""The protocol's MCP tools: what each publishes, its input schema, and a call's payload and envelope id.

Each signal of seed 000 (and PROGRESS, a finding, a result report) is a tool whose input schema is the
JSON Schema of the payload model itself, so a call is validated by the same model the text parser uses
(a finding is read as ``findings add`` reads one: :func:`agents.findings_parse.finding_of`).
A valid call is turned into an envelope by the adapters' own code (:meth:`agents.adapter.AgentBus.envelope`
and :meth:`~agents.adapter.AgentBus.publish`): the same type, payload and stream as the signal printed
as text, so the coordinator cannot tell the two apart. Two things differ, by nature: the envelope id
(the text path derives it from the signal's byte offset in the agent's output; a tool call has no offset,
so each call gets a fresh id) and ``source`` (``mcp:<server instance>`` instead of ``file:...`` or
``run:...``). An invalid call returns the validation errors as a tool error and publishes nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agents.findings_parse import finding_of, refuse_boolean_numbers
from agents.parser import describe_errors
from bus.envelope import Payload, content_id
from bus.findings import Finding
from bus.results import ResultReport
from bus.signals import ClarificationNeeded, CompletionReport, DelegateWork, Progress, StopWork

__all__ = [
    "PROTOCOL_TOOLS",
    "AgentField",
    "ProtocolTool",
    "StatusInput",
    "ToolInputError",
    "WaitInput",
    "call_id",
    "input_schema",
    "payload_of",
    "waits",
]

_WAIT_HINT: Final = (
    " Wait for the answer now: call wait_for_directive, or run `subagent-bus listen` in the background "
    "and end your turn."
)


class ToolInputError(ValueError):
    """A tool call's arguments are not valid; the message is what the agent is told."""


class AgentField(StrEnum):
    """The field of a tool's payload that the agent's id enters."""

    AGENT_ID = "agent_id"
    """Filled in, and hidden from the schema."""
    AGENT = "agent"
    """Defaults to the agent's id."""


@dataclass(frozen=True)
class ProtocolTool:
    """A publishing tool: its name, its payload model, and how the agent's id enters the payload."""

    name: str
    model: type[Payload]
    description: str
    agent_field: AgentField | None = AgentField.AGENT_ID
    hint: str = ""


PROTOCOL_TOOLS: Final[tuple[ProtocolTool, ...]] = (
    ProtocolTool(
        "request_clarification",
        ClarificationNeeded,
        "[CLARIFICATION_NEEDED] Ask your parent questions you cannot proceed without.",
        hint=_WAIT_HINT,
    ),
    ProtocolTool(
        "stop_work",
        StopWork,
        "[STOP_WORK] Signal that you cannot proceed (a blocker or an error) and what is needed to resume.",
        hint=_WAIT_HINT,
    ),
    ProtocolTool(
        "request_delegation",
        DelegateWork,
        "[DELEGATE_WORK] Ask for another background agent to take on a piece of work.",
        hint=" The decision arrives as a directive (wait_for_directive).",
    ),
    ProtocolTool(
        "report_completion",
        CompletionReport,
        "[COMPLETION_REPORT] Report that you finished: status, deliverables, summary.",
    ),
    ProtocolTool("report_progress", Progress, "[PROGRESS] Report how far you are (percent, message, ETA)."),
    ProtocolTool(
        "add_finding",
        Finding,
        "Report one finding (an issue at a file:line) to the group's append-only findings.",
        agent_field=AgentField.AGENT,
    ),
    ProtocolTool(
        "submit_result",
        ResultReport,
        "Submit your result report (the result contract: status, summary, findings, references...).",
        agent_field=AgentField.AGENT,
    ),
)


class WaitInput(BaseModel):
    """Block until a directive (the answer to your signal) arrives, and return its resume prompt."""

    model_config = ConfigDict(extra="forbid")

    timeout_seconds: float = Field(
        default=60.0, ge=0, le=3600, allow_inf_nan=False, strict=True, description="How long to wait."
    )
    """A JSON number: ``true`` or ``"1"`` is refused, as the schema says (strict: an int is still one)."""


class StatusInput(BaseModel):
    """Your own record as the coordinator keeps it: state, open questions, blocker, progress."""

    model_config = ConfigDict(extra="forbid")


def input_schema(tool: ProtocolTool) -> dict[str, Any]:
    """The tool's input schema: its payload model's JSON Schema, without the id the server fills in."""
    schema = tool.model.model_json_schema()
    if tool.agent_field is AgentField.AGENT_ID:
        schema["properties"].pop("agent_id", None)
    if tool.agent_field is not None:  # filled in, or defaulted to the agent's id
        schema["required"] = [name for name in schema.get("required", []) if name != tool.agent_field]
    schema["description"] = tool.description
    return schema


def payload_of(tool: ProtocolTool, arguments: Mapping[str, Any], agent_id: str) -> Payload:
    """The payload of a call, validated by the model; :class:`ToolInputError` says what is wrong."""
    values = dict(arguments)
    if tool.agent_field is AgentField.AGENT_ID:
        given = values.get("agent_id")
        if given is not None and given != agent_id:  # a null counts as absent, as in a signal
            raise ToolInputError(f"this server speaks for agent {agent_id!r}, not {given!r}")
        values["agent_id"] = agent_id
    elif tool.agent_field is not None and not values.get(tool.agent_field):
        values[tool.agent_field] = agent_id
    field = _non_finite(values)
    if field is not None:
        raise ToolInputError(
            f"invalid {tool.name} call: field '{field}': not a finite number (NaN, Infinity, or beyond "
            "a float's range), which the bus's JSON cannot carry"
        )
    try:  # findings read as `findings add` reads one: `"line": true` is no line 1
        if tool.model is Finding:
            return finding_of(values, agent_id)
        findings = values.get("findings") if tool.model is ResultReport else None
        for n, finding in enumerate(findings if isinstance(findings, list) else ()):
            if isinstance(finding, dict):
                refuse_boolean_numbers(finding, f"findings[{n}].")
    except ValueError as exc:
        raise ToolInputError(f"invalid {tool.name} call: {exc}") from None
    try:
        return tool.model.model_validate(values)
    except ValidationError as exc:
        raise ToolInputError(f"invalid {tool.name} call: {describe_errors(exc, limit=10)}") from None


def _non_finite(value: object, path: str = "") -> str | None:
    """Where ``value`` holds a float that is not finite (the JSON parser of the SDK takes ``NaN`` and
    ``Infinity``, and reads ``1e400`` as infinity), as ``describe_errors`` names a field; None if nowhere."""
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    if isinstance(value, dict):
        items: Iterable[tuple[str, object]] = (
            (f"{path}.{key}" if path else key, v) for key, v in value.items()
        )
    elif isinstance(value, list):
        items = ((f"{path}[{index}]", v) for index, v in enumerate(value))
    else:
        return None
    return next((found for where, v in items if (found := _non_finite(v, where)) is not None), None)


def call_id(tool: ProtocolTool, payload: Payload, agent_id: str) -> str | None:
    """The envelope id of a call that names its content for good, so that the same call made again (an
    agent retrying after the server was killed before it answered) is the same envelope, which the
    coordinator drops as a duplicate: a finding or a result is a fact, and a signal is one when the agent
    dated it. An undated signal asked again later is a new one: None (a new id)."""
    if not isinstance(payload, (Finding, ResultReport)) and getattr(payload, "timestamp", None) is None:
        return None
    return content_id(agent_id, f"mcp:{tool.name}", payload)


def waits(request: dict[str, Any]) -> bool:
    """Whether a request is a call of ``wait_for_directive``, which the end of the input does not wait for:
    it is cancelled, its directive (if it held one) left for the next wait."""
    params = request.get("params")
    return (
        request.get("method") == "tools/call"
        and isinstance(params, dict)
        and params.get("name") == "wait_for_directive"
    )
