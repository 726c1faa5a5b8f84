"""The findings views: the append-only findings stream, the merged view the coordinators keep, and replay.

They read a namespace and never create one (see :mod:`coordinator.views_cli`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import TypeVar

import click

from bus.cli_connection import redis_options, run_command
from bus.connection import Client
from bus.display import counted, json_bytes, one_line
from bus.findings import Finding
from bus.keys import Keys
from bus.params import not_blank
from bus.progress import Progress
from bus.settings import Settings
from coordinator.console import finding_line, grouped_lines, merged_lines
from coordinator.policy import Policy
from coordinator.rules import MergedFinding, merge_findings, merged_view
from coordinator.runtime import no_collection
from coordinator.view import each_group, group_ids, iter_findings, retired_note, was_retired
from coordinator.views_cli import POLICY_OPTION, other_groups, read_view

__all__ = ["commands"]

T = TypeVar("T")


def _read_findings(
    settings: Settings, group_id: str | None, shape: Callable[[str, Finding], T]
) -> dict[str, list[T]]:
    """Every finding in the findings stream by group (of one group, or of all, in group order), each
    kept as ``shape`` makes it of its group and itself, with progress on a terminal."""

    async def read(client: Client, keys: Keys) -> dict[str, list[T]]:
        return await _findings(client, keys, settings, group_id, shape)

    return run_command(read_view(settings, read, {}))


async def _findings(
    client: Client, keys: Keys, settings: Settings, group_id: str | None, shape: Callable[[str, Finding], T]
) -> dict[str, list[T]]:
    """The findings by group, each as ``shape`` makes it: a listing keeps only what it prints (a
    finding's model takes several times the memory of its line or JSON)."""
    by_group: dict[str, list[T]] = {}
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
            by_group.setdefault(group, []).append(shape(group, finding))
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
    hint = ": none of its agents reported one yet" if group_id in known else other_groups(known, group_id)
    click.echo(f"no findings for group {group_id!r} in namespace {settings.namespace!r}{hint}", err=True)


def _merged_state(settings: Settings, group_id: str | None, policy: Policy) -> dict[str, list[MergedFinding]]:
    """The merged findings the coordinators keep, by group: what the findings stream held when they
    applied it, trimmed or not since."""

    async def read(client: Client, keys: Keys) -> dict[str, list[MergedFinding]]:
        with Progress() as progress:  # a group of 200 000 merged findings takes seconds to read and merge

            def shown(read: int) -> None:
                progress.update(f"reading the merged findings: {read:,}")

            view: dict[str, list[MergedFinding]] = {}
            # group by group: a group's view keeps one report of each merged finding, its state every
            # agent's, and the state of each group read before it is gone when the next one is read
            async for state in each_group(client, keys, group_id, on_page=shown):
                if state.findings:
                    progress.update(
                        f"combining the {len(state.findings):,} merged findings of {state.group_id}"
                    )
                    view[state.group_id] = merged_view(state, policy)
                del state
        if group_id is not None and not view:
            await _no_findings(client, keys, settings, group_id)
        return view

    return run_command(read_view(settings, read, {}))


def _merged(by_group: dict[str, list[Finding]], policy: Policy) -> dict[str, list[MergedFinding]]:
    """Each group's findings merged on their own, as the coordinator merges them."""
    view: dict[str, list[MergedFinding]] = {}
    with Progress() as progress:
        for group, items in by_group.items():
            progress.update(f"combining the {len(items):,} findings of {group}")
            view[group] = merge_findings(items, policy)
    return view


def _merged_records(view: dict[str, list[MergedFinding]]) -> Iterator[dict[str, object]]:
    return ({"group_id": g, **m.model_dump(mode="json")} for g, merged in view.items() for m in merged)


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
@no_collection()  # the listing builds a model per finding: hundreds of thousands of them
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
    encoded: Iterable[str] = ()
    lines: list[str] = []
    if merged:
        view = _merged_state(settings, group_id, policy)
        if as_json or as_jsonl:
            encoded = (json_bytes(record, indent=as_json).decode() for record in _merged_records(view))
        else:
            lines = merged_lines(view)
        count = sum(len(items) for items in view.values())
        total = f"{counted(count, 'merged finding')}{_conflicts(view)}"
    elif as_json or as_jsonl:
        records = _read_findings(settings, group_id, partial(_record, indent=as_json))
        encoded = (record for items in records.values() for record in items)
        total = counted(sum(len(items) for items in records.values()), "finding")
    else:
        rows = _read_findings(settings, group_id, _line)
        lines = grouped_lines(rows)
        total = counted(sum(len(items) for items in rows.values()), "finding")
    if as_json:
        _echo_array(encoded)
    elif as_jsonl:
        for record in encoded:
            click.echo(record)
    else:
        for line in lines:
            click.echo(line)
        click.echo(total)


def _record(group_id: str, finding: Finding, *, indent: bool) -> str:
    """A raw finding's JSON record, which names its group, as text: orjson's bytes keep a buffer of
    several kilobytes each, ten times the text."""
    record = {"group_id": group_id, **finding.model_dump(mode="json", exclude_none=True)}
    return json_bytes(record, indent=indent).decode()


def _line(_group_id: str, finding: Finding) -> str:
    return finding_line(finding)


def _echo_array(records: Iterable[str]) -> None:
    """The JSON array of ``records`` (each indented JSON), as ``pretty_json`` prints a list, record by
    record: the whole list and its JSON, built first, held several times the memory of the findings."""
    first = True
    for record in records:
        click.echo("[" if first else ",")
        click.echo("  " + record.replace("\n", "\n  "), nl=False)
        first = False
    click.echo("[]" if first else "\n]")


@click.command()
@click.option("--group", "group_id", required=True, callback=not_blank, help="The task group to recompute.")
@POLICY_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the merged view as JSON.")
@redis_options
@no_collection()
def replay(settings: Settings, group_id: str, policy: Policy, as_json: bool) -> None:
    """Recompute a group's merged findings from the findings stream from id 0 (e.g. under new weights).

    Live state is not touched: this reads the append-only stream and prints the result. Of a group that
    was retired it recomputes every report since id 0, those of the lives before it started anew too.
    """

    async def read(client: Client, keys: Keys) -> tuple[dict[str, list[Finding]], bool]:
        by_group = await _findings(client, keys, settings, group_id, _finding)
        return by_group, bool(by_group) and await was_retired(client, keys, group_id)

    nothing: tuple[dict[str, list[Finding]], bool] = ({}, False)
    by_group, retired = run_command(read_view(settings, read, nothing))
    view = _merged(by_group, policy)
    if as_json:
        _echo_array(json_bytes(record, indent=True).decode() for record in _merged_records(view))
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


def _finding(_group_id: str, finding: Finding) -> Finding:
    return finding


def _conflicts(view: dict[str, list[MergedFinding]]) -> str:
    """``, N with conflicting severities (CONFLICT)`` after a merged listing's count, when any."""
    count = sum(m.severity_conflict for merged in view.values() for m in merged)
    return f", {count} with conflicting severities (CONFLICT)" if count else ""


commands: list[click.Command] = [findings, replay]
