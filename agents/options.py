"""Options shared by the agent side's commands: agent and group ids, and the adapters' common options."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Final, ParamSpec, TypeVar

import click

from agents.delivery import DeliverySpec, delivery_problem, program_problem
from agents.transcript import Format
from agents.whole_input import InputError, read_whole
from bus.display import has_control, unshown
from bus.envelope import MAX_NAME_CHARS
from bus.ops import Ops, ops_options
from bus.params import MILLISECONDS, FiniteFloatRange

__all__ = [
    "Common",
    "check_delivery",
    "check_id",
    "check_program",
    "common_options",
    "format_option",
    "id_problem",
]

P = ParamSpec("P")
R = TypeVar("R")


def id_problem(value: str) -> str | None:
    """What is wrong with an agent or group id, if anything: it must have 1 to 256 characters, not
    blank, and no control, invisible or line-breaking characters (an id is written into YAML signal
    templates and log lines, and shown by ``status``)."""
    if not value.strip():
        return "must not be blank"
    if len(value) > MAX_NAME_CHARS:
        return f"must be at most {MAX_NAME_CHARS} characters"
    if has_control(value):
        return "must not contain control characters (a newline, a tab...)"
    unseen = unshown(value)
    if unseen is not None:
        return f"must not contain invisible or line-breaking characters (U+{ord(unseen):04X})"
    return None


def check_id(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Click callback for an agent or group id (see :func:`id_problem`); a bad one is a usage error."""
    problem = None if value is None else id_problem(value)
    if problem is not None:
        raise click.BadParameter(problem)
    return value


format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice([f.value for f in Format]),
    default=Format.AUTO.value,
    show_default=True,
    help="Plain text, a Claude Code JSONL transcript, Codex CLI's exec --json output, or detect from the "
    "first lines.",
)
"""``--format``: how agent output is read (the command receives it as ``fmt``, a :class:`Format` value)."""


@dataclass(frozen=True)
class Common:
    """The options every adapter command shares."""

    agent_id: str
    group_id: str
    workdir: Path | None
    deliver: DeliverySpec | None
    retry_ms: int
    max_attempts: int
    heartbeat_s: float
    name: str | None
    task: str | None
    session_id: str | None
    fmt: Format
    ops: Ops
    wait_for_redis: bool


_OPTION_FIELDS = tuple(f.name for f in fields(Common) if f.name not in ("task", "fmt", "ops"))


def _deliver_option(ctx: click.Context, param: click.Parameter, value: str | None) -> DeliverySpec | None:
    if value is None:
        return None
    try:
        return DeliverySpec.parse(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def check_program(argv: list[str], option: str) -> None:
    """A usage error naming ``option`` when the template's program cannot start here: checked when a
    command starts (not while its options are parsed), since it would fail every launch or delivery."""
    problem = program_problem(argv)
    if problem is not None:
        raise click.BadParameter(problem, param_hint=f"'{option}'")


def check_delivery(spec: DeliverySpec) -> None:
    """A usage error for a ``--deliver`` that could deliver nothing here (see :func:`delivery_problem`)."""
    problem = delivery_problem(spec)
    if problem is not None:
        raise click.BadParameter(problem, param_hint="'--deliver'")


MAX_TASK_FILE_BYTES: Final = 16 << 20
"""A task prompt file larger than this is refused (a mistaken path such as a log or ``/dev/zero``)."""


def _read_task(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        return read_whole(path, MAX_TASK_FILE_BYTES, what="the task").decode()
    except InputError as exc:
        raise click.BadParameter(str(exc), param_hint="--task-file") from None
    except UnicodeDecodeError as exc:  # as `prompt` says: a task is text
        raise click.BadParameter(
            f"{path} is not UTF-8 (byte {exc.start})", param_hint="--task-file"
        ) from None


def common_options(command: Callable[P, R]) -> Callable[..., R]:
    """The shared adapter options (with :func:`bus.ops.ops_options`); the command receives them as one
    ``common: Common`` keyword."""

    @click.option("--agent-id", required=True, callback=check_id, help="The agent's id on the bus.")
    @click.option("--group", "group_id", required=True, callback=check_id, help="The agent's task group.")
    @click.option(
        "--workdir",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        help="Verify file:line references, findings and deliverables under this directory.",
    )
    @click.option(
        "--deliver",
        metavar="print|file:PATH|command:TEMPLATE",
        callback=_deliver_option,
        help="How directives reach the agent. Placeholders in TEMPLATE: {prompt} {agent_id} {group_id} "
        "{session_id} {type} {directive_id}; it is split like a shell line but run without a shell. "
        "Without it, directives wait in the inbox for `subagent-bus listen` (or the MCP tool "
        "wait_for_directive).",
    )
    @click.option(
        "--retry-ms",
        default=5000,
        show_default=True,
        type=MILLISECONDS,
        help="Delay before a failed delivery is retried.",
    )
    @click.option(
        "--max-attempts",
        default=5,
        show_default=True,
        type=click.IntRange(min=1),
        help="Deliveries of one directive before it is dead-lettered.",
    )
    @click.option(
        "--heartbeat",
        "heartbeat_s",
        default=30.0,
        show_default=True,
        type=FiniteFloatRange(min=0.01),
        help="Seconds between heartbeats.",
    )
    @click.option("--name", help="The agent's name (its kind, e.g. security-auditor) for AGENT_STARTED.")
    @click.option(
        "--task-file",
        metavar="PATH|-",
        help="The agent's task prompt, reported in AGENT_STARTED (- reads stdin, but for adapter stdin).",
    )
    @click.option("--session-id", help="Session id for {session_id} when the output does not carry one.")
    @click.option(
        "--wait-for-redis",
        is_flag=True,
        help="At start (connecting, and for watch reading its checkpoint), wait for a Redis that is "
        "unreachable or down (retrying, until a stop signal) instead of exiting 1. A launcher starts its "
        "adapters with it.",
    )
    @format_option
    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> R:
        values = {name: kwargs.pop(name) for name in _OPTION_FIELDS}
        task_file = kwargs.pop("task_file")
        if task_file == "-" and click.get_current_context().command.name == "stdin":
            raise click.BadParameter(
                "adapter stdin reads the agent's output from stdin: give the task in a file",
                param_hint="--task-file",
            )
        task, fmt = _read_task(task_file), Format(kwargs.pop("fmt"))
        common = Common(**values, task=task, fmt=fmt, ops=kwargs.pop("ops"))
        if common.deliver is not None:
            check_delivery(common.deliver)
        return command(*args, common=common, **kwargs)  # type: ignore[arg-type]

    return ops_options(wrapper)
