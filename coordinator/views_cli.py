"""The views of the coordinators' state: status and inbox (findings and replay:
:mod:`coordinator.findings_cli`).

They read a namespace and never create one: a mistyped --namespace would otherwise fix a shard count
before the coordinator meant to choose it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import click

from bus.cli_connection import redis_options, run_command
from bus.connection import Client, connect
from bus.display import json_bytes
from bus.errors import BusError, NamespaceMissing
from bus.fields import Model
from bus.human_key import KEY_FILE_ENV, read_key
from bus.keys import Keys, open_namespace
from bus.params import EnvOption, FiniteFloatRange, an_id
from bus.progress import Progress
from bus.settings import Settings
from coordinator.console import (
    NOTHING_WAITS,
    inbox_lines,
    render,
    unresolved_blockers,
)
from coordinator.policy import Policy
from coordinator.queued import QueuedCommand, human_commands, load_queued, with_window
from coordinator.rules import GroupSummary, summarize
from coordinator.view import (
    group_ids,
    load_summaries,
    no_coordinator_note,
    retired_note,
)

__all__ = ["HUMAN_KEY_OPTION", "POLICY_OPTION", "commands", "other_groups", "pretty_json", "read_view"]

T = TypeVar("T")


def _load_policy(_ctx: click.Context, _param: click.Parameter, path: Path | None) -> Policy:
    """The policy of ``--policy`` (defaults without one), read while the options are parsed: a bad
    file is a usage error naming it before the command does anything (or starts a local server)."""
    try:
        return Policy.load(path) if path else Policy()
    except BusError as exc:
        raise click.BadParameter(str(exc)) from None


POLICY_OPTION = click.option(
    "--policy",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar="SUBAGENT_BUS_POLICY",
    cls=EnvOption,
    callback=_load_policy,
    help="Policy file (TOML or YAML): delegation limits, expertise weights, timeouts.",
)


def _read_human_key(_ctx: click.Context, _param: click.Parameter, path: Path | None) -> bytes | None:
    """The key of ``--human-key-file``, read while the options are parsed, as the policy is."""
    try:
        return read_key(path) if path else None
    except BusError as exc:
        raise click.BadParameter(str(exc)) from None


HUMAN_KEY_OPTION = click.option(
    "--human-key-file",
    "human_key",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar=KEY_FILE_ENV,
    cls=EnvOption,
    callback=_read_human_key,
    help='The key human commands are signed with (README "Security"): the people\'s commands sign with it, '
    "and a coordinator given it applies only human commands signed with it (every coordinator of a namespace "
    "needs the same key, or none: one does not start beside another that disagrees). Keep it out of agents' "
    "reach.",
)


async def read_view(
    settings: Settings, read: Callable[[Client, Keys], Awaitable[T]], nothing: T, *, named: bool = False
) -> T:
    """``read`` over the namespace; ``nothing`` when it does not exist yet: a view does not create it
    (a mistyped --namespace would fix a shard count before the coordinator meant to). A note on stderr
    then says so, unless the view's own text names the namespace (``named``)."""
    client = await connect(settings)
    try:
        try:
            keys = await open_namespace(client, settings.namespace, settings.shards, create=False)
        except NamespaceMissing:
            if not named:
                click.echo(
                    f"note: namespace {settings.namespace!r} does not exist on this server (yet): "
                    "nothing to show; check --namespace",
                    err=True,
                )
            return nothing
        return await read(client, keys)
    finally:
        await client.aclose()


def pretty_json(value: object) -> str:
    return json_bytes(value, indent=True).decode()


async def _status(
    settings: Settings, group_id: str | None, *, as_json: bool = False
) -> tuple[list[GroupSummary], list[str]]:
    """The summaries, and the lines said after them (a coordinator stopped) or instead of them (no such
    group, and why); ``as_json``, a missing namespace is said as every view says it (on stderr)."""
    none = f"no groups yet{f' named {group_id!r}' if group_id else ''} in namespace {settings.namespace!r}"

    async def read(client: Client, keys: Keys) -> tuple[list[GroupSummary], list[str]]:
        summaries = await load_summaries(client, keys, group_id)  # one connection: a slow server met once
        if summaries:
            note = await no_coordinator_note(client, keys)  # a coordinator stopped: the states are old
            return summaries, [note.strip()] if note else []
        retired = await retired_note(client, keys, group_id) if group_id else None
        if retired:
            return [], [retired]
        if group_id:  # its signals may wait for a coordinator: said too
            return [], [none + await _known(client, keys, group_id) + await no_coordinator_note(client, keys)]
        return [], [none + await no_coordinator_note(client, keys)]

    missing = f"{none}: it does not exist on this server (yet); check --namespace"
    return await read_view(settings, read, ([], [] if as_json else [missing]), named=not as_json)


async def _status_lines(settings: Settings, group_id: str | None) -> list[str]:
    summaries, said = await _status(settings, group_id)
    return [line for summary in summaries for line in render(summary, settings.namespace)] + said


def _not_both(ctx: click.Context, param: click.Parameter, value: T) -> T:
    """``--watch`` and ``--json`` refused together while the options are parsed (before the connection
    options start a local server): whichever of the two click handles second sees the other."""
    other = {"as_json": "watch", "watch": "as_json"}[param.name or ""]
    if value not in (None, False) and ctx.params.get(other) not in (None, False):
        raise click.UsageError("--watch and --json do not go together")
    return value


@click.command()
@click.option("--group", "group_id", callback=an_id, help="Only this task group.")
@click.option("--json", "as_json", is_flag=True, callback=_not_both, help="Print the summaries as JSON.")
@click.option(
    "--watch",
    "watch",
    type=FiniteFloatRange(min=0.1, max=86_400),
    is_flag=False,
    flag_value=1.0,
    default=None,
    metavar="[SECONDS]",
    callback=_not_both,
    help="Refresh a live view every SECONDS (default 1) until Ctrl-C.",
)
@redis_options
def status(settings: Settings, group_id: str | None, as_json: bool, watch: float | None) -> None:
    """Agents, states, progress bars, open questions, blockers, pending delegations and violations.

    Per agent it also shows how many envelopes the coordinators applied and the id of the last one.
    """
    if watch is None:
        if as_json:  # what the text says besides the groups on stderr: [] alone looks the same for a typo
            summaries, said = run_command(_status(settings, group_id, as_json=True))
            click.echo(pretty_json([s.model_dump(mode="json") for s in summaries]))
            for line in said:
                click.echo(line, err=True)
        else:
            click.echo("\n".join(run_command(_status_lines(settings, group_id))))
        return
    # The first view's error is the command's, as for every command (a wrong URL, credentials or
    # --shards would never mend); a later one is a server away for a while (restarted, failing over).
    lines = run_command(_status_lines(settings, group_id))
    while True:  # until Ctrl-C, which exits 130 like any other command's
        click.clear()
        click.echo(f"subagent-bus status  (every {watch:g}s, Ctrl-C to quit)\n" + "\n".join(lines))
        time.sleep(watch)  # a refresh interval the user asked for, not a wait for an event
        try:
            lines = run_command(_status_lines(settings, group_id))
        except click.ClickException as exc:
            lines = [f"{exc.format_message()}; trying again every {watch:g}s"]


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the open items as JSON.")
@HUMAN_KEY_OPTION
@redis_options
def inbox(settings: Settings, as_json: bool, human_key: bytes | None) -> None:
    """What waits for a human: questions, blockers, delegations to approve, escalations, the groups
    whose agents disagree on the severity of a merged finding, and the agents that finished with a
    blocker unresolved (a result report that did not reach the coordinator, say).

    Each item comes with the command that acts on it, or that shows more (with --json, each names its
    group_id). A command given while no coordinator runs waits on the bus until one does: its item
    stays here with the command queued for it (with --json, under "queued"); with --human-key-file,
    only the commands signed with that key, which are the ones the coordinators will apply.
    """

    async def read(client: Client, keys: Keys) -> tuple[list[GroupSummary], list[QueuedCommand], str]:
        # the queue first: a command applied meanwhile is then shown applied (its item gone), not open
        # without it (an item that looks unanswered is answered again, and that answer refused)
        with Progress() as progress:
            shards = range(keys.shards)
            found = await load_queued(
                client, keys, shards, human=True, key=human_key, progress=progress.update
            )
        queued = human_commands(found)
        summaries = await load_summaries(client, keys, None)
        if queued:
            summaries, queued = await _settled(client, keys, summaries, queued)
        return summaries, queued, await no_coordinator_note(client, keys)

    nothing: tuple[list[GroupSummary], list[QueuedCommand], str] = ([], [], "")
    summaries, queued, note = run_command(read_view(settings, read, nothing))
    if as_json:
        items: dict[str, list[tuple[str, Model]]] = {
            "questions": [(s.group_id, q) for s in summaries for q in s.open_questions if not q.answered],
            "blockers": [(s.group_id, b) for s in summaries for b in s.blockers],
            "delegations": [(s.group_id, d) for s in summaries for d in s.pending_delegations],
            "escalations": [(s.group_id, e) for s in summaries for e in s.escalations],
        }
        listed: dict[str, list[dict[str, object]]] = {
            name: [{"group_id": g, **m.model_dump(mode="json")} for g, m in pairs]
            for name, pairs in items.items()
        }
        listed["unresolved"] = [
            {"group_id": s.group_id, "agent_id": agent_id, "blocker": blocker}
            for s in summaries
            for agent_id, blocker in unresolved_blockers(s)
        ]
        listed["conflicts"] = [
            {"group_id": s.group_id, "severity_conflicts": s.severity_conflicts}
            for s in summaries
            if s.severity_conflicts
        ]
        listed["queued"] = [q.model_dump(mode="json") for q in queued]
        click.echo(pretty_json(listed))
        if note:  # as `status --json` says it: on stderr, the JSON on stdout
            click.echo(note.strip(), err=True)
        return
    lines = inbox_lines(summaries, settings.namespace, queued)
    if note and lines == [NOTHING_WAITS]:
        lines[-1] += note
    elif note:
        lines.append(note.strip())
    click.echo("\n".join(lines))


async def _settled(
    client: Client, keys: Keys, summaries: list[GroupSummary], queued: list[QueuedCommand]
) -> tuple[list[GroupSummary], list[QueuedCommand]]:
    """``summaries`` and ``queued`` without the commands a coordinator applied between the two reads: the
    state of each group a command is queued for is read again with its window of applied ids, as one
    commit left them, and a command in that window is applied, its item as that state shows it."""
    fresh: dict[str, GroupSummary] = {}
    applied: set[str] = set()
    counts = {s.group_id: s.findings for s in summaries}
    for group_id in sorted({q.group_id for q in queued}):
        state = await with_window(client, keys, group_id)
        if state is not None:
            fresh[group_id] = summarize(state, findings=counts.get(group_id, 0))
            applied |= {q.id for q in queued if q.group_id == group_id and q.id in state.window}
    known = {s.group_id for s in summaries}
    summaries = [fresh.get(s.group_id, s) for s in summaries] + [
        summary for group_id, summary in sorted(fresh.items()) if group_id not in known
    ]
    return summaries, [q for q in queued if q.id not in applied]


async def _known(client: Client, keys: Keys, group_id: str) -> str:
    """The other groups the coordinators know, for a message about ``group_id`` (a typo, maybe)."""
    return other_groups(await group_ids(client, keys), group_id)


def other_groups(groups: list[str], group_id: str) -> str:
    known = [g for g in groups if g != group_id]
    return f"; known groups: {', '.join(known[:10])}{' ...' if len(known) > 10 else ''}" if known else ""


commands: list[click.Command] = [status, inbox]
