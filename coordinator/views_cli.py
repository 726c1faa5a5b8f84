"""The views of the coordinators' state: status, inbox, findings (raw and merged) and replay.

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
from bus.display import counted, json_bytes, one_line
from bus.errors import BusError, NamespaceMissing
from bus.fields import Model
from bus.findings import Finding
from bus.keys import Keys, open_namespace
from bus.params import FiniteFloatRange, not_blank
from bus.progress import Progress
from bus.settings import Settings
from coordinator.console import (
    NOTHING_WAITS,
    finding_lines,
    inbox_lines,
    merged_lines,
    render,
    unresolved_blockers,
)
from coordinator.policy import Policy
from coordinator.queued import QueuedCommand, human_commands, load_queued
from coordinator.rules import GroupSummary, MergedFinding, merge_findings, merged_view
from coordinator.view import (
    group_ids,
    iter_findings,
    load_groups,
    load_summaries,
    no_coordinator_note,
    retired_note,
    was_retired,
)

__all__ = ["POLICY_OPTION", "commands"]

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
    show_envvar=True,
    callback=_load_policy,
    help="Policy file (TOML or YAML): delegation limits, expertise weights, timeouts.",
)


async def _read(settings: Settings, read: Callable[[Client, Keys], Awaitable[T]], nothing: T) -> T:
    """``read`` over the namespace; ``nothing`` when it does not exist yet: a view does not create it
    (a mistyped --namespace would fix a shard count before the coordinator meant to)."""
    client = await connect(settings)
    try:
        try:
            keys = await open_namespace(client, settings.namespace, settings.shards, create=False)
        except NamespaceMissing:
            return nothing
        return await read(client, keys)
    finally:
        await client.aclose()


def _dump(value: object) -> str:
    return json_bytes(value, indent=True).decode()


async def _summaries(settings: Settings, group_id: str | None = None) -> list[GroupSummary]:
    async def read(client: Client, keys: Keys) -> list[GroupSummary]:
        return await load_summaries(client, keys, group_id)

    return await _read(settings, read, [])


async def _status_lines(settings: Settings, group_id: str | None) -> list[str]:
    none = f"no groups yet{f' named {group_id!r}' if group_id else ''} in namespace {settings.namespace!r}"

    async def read(client: Client, keys: Keys) -> list[str]:  # one connection: a slow server is met once
        summaries = await load_summaries(client, keys, group_id)
        if summaries:
            note = await no_coordinator_note(client, keys)  # a coordinator stopped: the states are old
            lines = [line for summary in summaries for line in render(summary, settings.namespace)]
            return [*lines, note.strip()] if note else lines
        retired = await retired_note(client, keys, group_id) if group_id else None
        if retired:
            return [retired]
        if group_id:
            return [none + await _known(client, keys, group_id)]
        return [none + await no_coordinator_note(client, keys)]

    return await _read(settings, read, [none])


def _not_both(ctx: click.Context, param: click.Parameter, value: T) -> T:
    """``--watch`` and ``--json`` refused together while the options are parsed (before the connection
    options start a local server): whichever of the two click handles second sees the other."""
    other = {"as_json": "watch", "watch": "as_json"}[param.name or ""]
    if value not in (None, False) and ctx.params.get(other) not in (None, False):
        raise click.UsageError("--watch and --json do not go together")
    return value


@click.command()
@click.option("--group", "group_id", callback=not_blank, help="Only this task group.")
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
        if as_json:
            summaries = run_command(_summaries(settings, group_id))
            click.echo(_dump([s.model_dump(mode="json") for s in summaries]))
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
@redis_options
def inbox(settings: Settings, as_json: bool) -> None:
    """What waits for a human: questions, blockers, delegations to approve, escalations, the groups
    whose agents disagree on the severity of a merged finding, and the agents that finished with a
    blocker unresolved (a result report that did not reach the coordinator, say).

    Each item comes with the command that acts on it, or that shows more (with --json, each names its
    group_id). A command given while no coordinator runs waits on the bus until one does: its item
    stays here with the command queued for it (with --json, under "queued").
    """

    async def read(client: Client, keys: Keys) -> tuple[list[GroupSummary], list[QueuedCommand], str]:
        # the queue first: a command applied meanwhile is then shown applied (its item gone), not open
        # without it (an item that looks unanswered is answered again, and that answer refused)
        queued = human_commands(await load_queued(client, keys, range(keys.shards), human=True))
        summaries = await load_summaries(client, keys, None)
        return summaries, queued, "" if as_json else await no_coordinator_note(client, keys)

    nothing: tuple[list[GroupSummary], list[QueuedCommand], str] = ([], [], "")
    summaries, queued, note = run_command(_read(settings, read, nothing))
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
        click.echo(_dump(listed))
        return
    lines = inbox_lines(summaries, settings.namespace, queued)
    if note and lines == [NOTHING_WAITS]:
        lines[-1] += note
    elif note:
        lines.append(note.strip())
    click.echo("\n".join(lines))


def _read_findings(settings: Settings, group_id: str | None) -> dict[str, list[Finding]]:
    """Every finding in the findings stream by group (of one group, or of all, in group order), with
    progress on a terminal."""

    async def read(client: Client, keys: Keys) -> dict[str, list[Finding]]:
        return await _findings(client, keys, settings, group_id)

    return run_command(_read(settings, read, {}))


async def _findings(
    client: Client, keys: Keys, settings: Settings, group_id: str | None
) -> dict[str, list[Finding]]:
    by_group: dict[str, list[Finding]] = {}
    skipped: list[str] = []  # the first entry that is no envelope
    count = 0
    with Progress() as progress:

        def shown(read: int) -> None:
            progress.update(f"reading the findings stream: {read:,} entries")

        def foreign(stream: str, entry_id: str, why: str) -> None:
            nonlocal count
            count += 1
            if not skipped:
                skipped.append(one_line(f"{stream} {entry_id}: {why}"))

        async for _, finding, _, group in iter_findings(
            client, keys, group_id, on_page=shown, on_skipped=foreign
        ):
            by_group.setdefault(group, []).append(finding)
    if count == 1:  # written by something other than a coordinator: said, not shown as findings
        click.echo(f"skipped an entry of the findings stream that is no envelope: {skipped[0]}", err=True)
    elif count:
        many = f"{count:,} entries of the findings stream that are no envelopes"
        click.echo(f"skipped {many} (the first: {skipped[0]})", err=True)
    if group_id is not None and not by_group:
        await _no_findings(client, keys, settings, group_id)
    return dict(sorted(by_group.items()))


async def _no_findings(client: Client, keys: Keys, settings: Settings, group_id: str) -> None:
    """Say on stderr why a group's listing is empty: a mistyped group looks like a quiet one, and a
    retired one has no merged view kept."""
    retired = await retired_note(client, keys, group_id)
    if retired:
        click.echo(retired, err=True)
        return
    known = await group_ids(client, keys)
    hint = ": none of its agents reported one yet" if group_id in known else _others(known, group_id)
    click.echo(f"no findings for group {group_id!r} in namespace {settings.namespace!r}{hint}", err=True)


async def _known(client: Client, keys: Keys, group_id: str) -> str:
    """The other groups the coordinators know, for a message about ``group_id`` (a typo, maybe)."""
    return _others(await group_ids(client, keys), group_id)


def _others(groups: list[str], group_id: str) -> str:
    known = [g for g in groups if g != group_id]
    return f"; known groups: {', '.join(known[:10])}{' ...' if len(known) > 10 else ''}" if known else ""


def _merged_state(settings: Settings, group_id: str | None, policy: Policy) -> dict[str, list[MergedFinding]]:
    """The merged findings the coordinators keep, by group: what the findings stream held when they
    applied it, trimmed or not since."""

    async def read(client: Client, keys: Keys) -> dict[str, list[MergedFinding]]:
        with Progress() as progress:  # a group of 200 000 merged findings takes seconds to read and merge

            def shown(read: int) -> None:
                progress.update(f"reading the merged findings: {read:,}")

            states = await load_groups(client, keys, group_id, on_page=shown)
            view: dict[str, list[MergedFinding]] = {}
            for state in states:
                if state.findings:
                    progress.update(
                        f"combining the {len(state.findings):,} merged findings of {state.group_id}"
                    )
                    view[state.group_id] = merged_view(state, policy)
        if group_id is not None and not view:
            await _no_findings(client, keys, settings, group_id)
        return view

    return run_command(_read(settings, read, {}))


def _merged(by_group: dict[str, list[Finding]], policy: Policy) -> dict[str, list[MergedFinding]]:
    """Each group's findings merged on their own, as the coordinator merges them."""
    view: dict[str, list[MergedFinding]] = {}
    with Progress() as progress:
        for group, items in by_group.items():
            progress.update(f"combining the {len(items):,} findings of {group}")
            view[group] = merge_findings(items, policy)
    return view


def _merged_records(view: dict[str, list[MergedFinding]]) -> list[dict[str, object]]:
    return [{"group_id": g, **m.model_dump(mode="json")} for g, merged in view.items() for m in merged]


@click.group("findings", invoke_without_command=True)
@click.option("--group", "group_id", callback=not_blank, help="Only this task group.")
@click.option(
    "--merged",
    is_flag=True,
    help="The deduplicated view the coordinators keep, with combined confidence under --policy.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON array.")
@click.option("--jsonl", "as_jsonl", is_flag=True, help="One JSON object per line.")
@POLICY_OPTION
@redis_options
@click.pass_context
def findings(
    ctx: click.Context,
    settings: Settings,
    group_id: str | None,
    merged: bool,
    as_json: bool,
    as_jsonl: bool,
    policy: Policy,
) -> None:
    """The append-only findings stream, or (--merged) the deduplicated view the coordinators keep.

    Each JSON record names its group_id (`findings add` reads the raw ones, and takes --group instead).
    """
    if ctx.invoked_subcommand is not None:
        return
    if as_json and as_jsonl:
        raise click.UsageError("--json and --jsonl exclude each other")
    records: list[dict[str, object]]
    if merged:
        view = _merged_state(settings, group_id, policy)
        records = _merged_records(view)
        lines = merged_lines(view)
        total = f"{counted(len(records), 'merged finding')}{_conflicts(view)}"
    else:
        by_group = _read_findings(settings, group_id)
        records = [
            {"group_id": group, **f.model_dump(mode="json", exclude_none=True)}
            for group, items in by_group.items()
            for f in items
        ]
        lines = finding_lines(by_group)
        total = counted(len(records), "finding")
    if as_json:
        click.echo(_dump(records))
    elif as_jsonl:
        for record in records:
            click.echo(json_bytes(record).decode())
    else:
        for line in lines:
            click.echo(line)
        click.echo(total)


@click.command()
@click.option("--group", "group_id", required=True, callback=not_blank, help="The task group to recompute.")
@POLICY_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the merged view as JSON.")
@redis_options
def replay(settings: Settings, group_id: str, policy: Policy, as_json: bool) -> None:
    """Recompute a group's merged findings from the findings stream from id 0 (e.g. under new weights).

    Live state is not touched: this reads the append-only stream and prints the result. Of a group that
    was retired it recomputes every report since id 0, those of the lives before it started anew too.
    """

    async def read(client: Client, keys: Keys) -> tuple[dict[str, list[Finding]], bool]:
        by_group = await _findings(client, keys, settings, group_id)
        return by_group, bool(by_group) and await was_retired(client, keys, group_id)

    nothing: tuple[dict[str, list[Finding]], bool] = ({}, False)
    by_group, retired = run_command(_read(settings, read, nothing))
    view = _merged(by_group, policy)
    if as_json:
        click.echo(_dump(_merged_records(view)))
    else:
        for line in merged_lines(view):
            click.echo(line)
        count = sum(len(merged) for merged in view.values())
        click.echo(f"{counted(count, 'merged finding')} recomputed for group {group_id!r}{_conflicts(view)}")
    if retired:
        click.echo(
            f"group {group_id!r} was retired: this view holds the reports of each of its lives since id 0 "
            "(`findings --merged` of a group started anew holds only those since)",
            err=True,
        )


def _conflicts(view: dict[str, list[MergedFinding]]) -> str:
    """``, N with conflicting severities (CONFLICT)`` after a merged listing's count, when any."""
    count = sum(m.severity_conflict for merged in view.values() for m in merged)
    return f", {count} with conflicting severities (CONFLICT)" if count else ""


commands: list[click.Command] = [status, inbox, findings, replay]
