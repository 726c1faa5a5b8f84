"""The findings views: the append-only findings stream, the merged view the coordinators keep, and replay.

They read a namespace and never create one (see :mod:`coordinator.views_cli`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any, TypeVar

import click

from bus.cli_connection import redis_options, run_command
from bus.connection import Client, translated
from bus.display import counted, json_bytes, one_line
from bus.findings import Finding
from bus.keys import Keys, StreamKind
from bus.params import an_id
from bus.progress import Progress
from bus.settings import Settings
from coordinator.console import finding_line, group_heading, grouped_lines, merged_command, merged_lines
from coordinator.policy import Policy
from coordinator.rules import MergedFinding, merge_findings, merged_view
from coordinator.rules.findings import reporter_key
from coordinator.runtime import no_collection
from coordinator.store import merged_key
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
    client: Client,
    keys: Keys,
    settings: Settings,
    group_id: str | None,
    shape: Callable[[str, Finding], T],
    *,
    senders: bool = False,
) -> dict[str, list[T]]:
    """The findings by group, each as ``shape`` makes it: a listing keeps only what it prints (a
    finding's model takes several times the memory of its line or JSON). ``senders``: a finding that
    names no agent (not a coordinator's copy, which always names one) is its sender's, as the rules
    take it."""
    by_group: dict[str, list[T]] = {}
    skipped: list[str] = []  # the first entry that is no finding's envelope
    count = 0
    with Progress() as progress:

        def shown(read: int) -> None:
            progress.update(f"reading the findings stream: {read:,} entries")

        def foreign(stream: str, entry_id: str, why: str) -> None:
            nonlocal count
            count += 1
            if not skipped:
                skipped.append(one_line(f"{stream} {entry_id}: {why}"))

        async for _, found, agent_id, group in iter_findings(
            client, keys, group_id, on_page=shown, on_skipped=foreign
        ):
            named = (
                found.model_copy(update={"agent": reporter_key(agent_id)})
                if senders and not found.agent
                else found
            )
            by_group.setdefault(group, []).append(shape(group, named))
    if count == 1:  # written by something other than a coordinator: said, not shown as findings
        click.echo(f"skipped an entry of the findings stream that is no finding: {skipped[0]}", err=True)
    elif count:
        many = f"{count:,} entries of the findings stream that are no findings"
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
    if group_id not in known:
        hint = other_groups(known, group_id)
    elif await client.hlen(merged_key(keys, keys.shard_of(group_id), group_id)):
        hint = (
            ": the findings stream holds none of its reports any more (trimmed); "
            f"`{merged_command(group_id, settings.namespace)}` shows the merged view the coordinators keep"
        )
    else:
        hint = ": none of its agents reported one yet"
    click.echo(f"no findings for group {group_id!r} in namespace {settings.namespace!r}{hint}", err=True)


def _list_merged(settings: Settings, group_id: str | None, policy: Policy, listing: _MergedListing) -> None:
    """Add to ``listing`` the merged findings the coordinators keep, group by group: what the findings
    stream held when they applied it, trimmed or not since."""

    async def read(client: Client, keys: Keys) -> None:
        with Progress() as progress:  # a group of 200 000 merged findings takes seconds to read and merge

            def shown(read: int) -> None:
                progress.update(f"reading the merged findings: {read:,}")

            # One group at a time, printed once combined: a listing of many groups held every group's
            # state, then every group's view, until the last was combined.
            async for state in each_group(client, keys, group_id, on_page=shown):
                if state.findings:
                    progress.update(
                        f"combining the {len(state.findings):,} merged findings of {state.group_id}"
                    )
                    merged = merged_view(state, policy)
                    progress.close()  # erased before the listing goes on under it
                    listing.add(state.group_id, merged)
                    del merged
                del state
        if group_id is not None and not listing.count:
            await _no_findings(client, keys, settings, group_id)

    run_command(read_view(settings, read, None))


class _MergedListing:
    """A merged listing written group by group. In text, a group's lines come under a ``group G:``
    heading when several groups have findings, which only a second one tells: the first group's lines
    wait for it (or for the end)."""

    def __init__(self, *, as_json: bool, as_jsonl: bool) -> None:
        self.count = 0
        self.conflicts = 0
        self._array = _JsonArray() if as_json else None
        self._jsonl = as_jsonl
        self._first: tuple[str, list[str]] | None = None
        self._groups = 0

    def add(self, group: str, merged: list[MergedFinding]) -> None:
        self.count += len(merged)
        self.conflicts += sum(m.severity_conflict for m in merged)
        self._groups += 1
        if self._array is not None or self._jsonl:
            for record in _merged_records({group: merged}):
                text = json_bytes(record, indent=self._array is not None).decode()
                if self._array is not None:
                    self._array.add(text)
                else:
                    click.echo(text)
            return
        lines = merged_lines({group: merged})
        if self._groups == 1:
            self._first = (group, lines)
            return
        if self._first is not None:
            (held, held_lines), self._first = self._first, None
            lines = grouped_lines({held: held_lines, group: lines})
        else:
            lines = [group_heading(group), *lines]
        for line in lines:
            click.echo(line)

    def close(self) -> None:
        """End the listing: the JSON array, or the lines of the only group (under no heading)."""
        if self._array is not None:
            self._array.close()
        elif self._first is not None:
            for line in self._first[1]:
                click.echo(line)
            self._first = None


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


def _one_format(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    """``--json`` and ``--jsonl`` refused together while the options are parsed (before the connection
    options start a local server): whichever of the two click handles second sees the other."""
    other = "as_jsonl" if param.name == "as_json" else "as_json"
    if value and ctx.params.get(other):
        raise click.UsageError("--json and --jsonl exclude each other")
    return value


@click.group("findings", invoke_without_command=True)
@click.option("--group", "group_id", callback=an_id, help="Only this task group.")
@click.option(
    "--merged",
    is_flag=True,
    help="The deduplicated view the coordinators keep, with combined confidence under --policy.",
)
@click.option("--json", "as_json", is_flag=True, callback=_one_format, help="One JSON array.")
@click.option("--jsonl", "as_jsonl", is_flag=True, callback=_one_format, help="One JSON object per line.")
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

    \b
    Examples:
      subagent-bus findings --group audit --merged
      subagent-bus findings --group audit --jsonl > findings.jsonl
    """
    if ctx.invoked_subcommand is not None:
        return
    if merged:
        listing = _MergedListing(as_json=as_json, as_jsonl=as_jsonl)
        _list_merged(settings, group_id, policy, listing)
        listing.close()
        if not (as_json or as_jsonl):
            click.echo(f"{counted(listing.count, 'merged finding')}{_conflicts(listing.conflicts)}")
        return
    encoded: Iterable[str] = ()
    lines: list[str] = []
    if as_json or as_jsonl:
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


class _JsonArray:
    """A JSON array of records (each indented JSON), as ``pretty_json`` prints a list, written record by
    record: the whole list and its JSON, built first, held several times the memory of the findings."""

    def __init__(self) -> None:
        self._first = True

    def add(self, record: str) -> None:
        click.echo("[" if self._first else ",")
        click.echo("  " + record.replace("\n", "\n  "), nl=False)
        self._first = False

    def close(self) -> None:
        click.echo("[]" if self._first else "\n]")


def _echo_array(records: Iterable[str]) -> None:
    array = _JsonArray()
    for record in records:
        array.add(record)
    array.close()


@click.command()
@click.option("--group", "group_id", required=True, callback=an_id, help="The task group to recompute.")
@POLICY_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the merged view as JSON.")
@redis_options
@no_collection()
def replay(settings: Settings, group_id: str, policy: Policy, as_json: bool) -> None:
    """Recompute a group's merged findings from the findings stream from id 0 (e.g. under new weights).

    Live state is not touched: this reads the append-only stream and prints the result. Of a group that
    was retired it recomputes every report since id 0, those of the lives before it started anew too.
    """

    async def read(client: Client, keys: Keys) -> tuple[dict[str, list[Finding]], bool, int]:
        by_group = await _findings(client, keys, settings, group_id, _finding, senders=True)
        if not by_group:
            return by_group, False, 0
        return by_group, await was_retired(client, keys, group_id), await _trimmed(client, keys, group_id)

    nothing: tuple[dict[str, list[Finding]], bool, int] = ({}, False, 0)
    by_group, retired, trimmed = run_command(read_view(settings, read, nothing))
    view = _merged(by_group, policy)
    if as_json:
        _echo_array(json_bytes(record, indent=True).decode() for record in _merged_records(view))
    else:
        for line in merged_lines(view):
            click.echo(line)
        count = sum(len(merged) for merged in view.values())
        conflicts = _conflicts(sum(m.severity_conflict for merged in view.values() for m in merged))
        click.echo(f"{counted(count, 'merged finding')} recomputed for group {group_id!r}{conflicts}")
    if trimmed:
        # The stream is the shard's: which group each entry trimmed was of, nothing says any more.
        click.echo(
            f"the findings stream of the shard of group {group_id!r} has lost {trimmed:,} entries to "
            "trimming: reports of this group among them would be missing from this view; "
            f"`{merged_command(group_id, settings.namespace)}` shows the merged view the coordinators keep",
            err=True,
        )
    if retired:
        click.echo(
            f"group {group_id!r} was retired: this view holds the reports of each of its lives since id 0 "
            "(`findings --merged` of a group started anew holds only those since)",
            err=True,
        )


async def _trimmed(client: Client, keys: Keys, group_id: str) -> int:
    """How many entries the findings stream of the group's shard has lost (trimmed); 0 also where the
    server does not say (Redis before 7)."""
    with translated():
        info: Any = await client.xinfo_stream(keys.stream(keys.shard_of(group_id), StreamKind.FINDINGS))
    added = info.get("entries-added")
    return max(0, int(added) - int(info["length"])) if added is not None else 0


def _finding(_group_id: str, finding: Finding) -> Finding:
    return finding


def _conflicts(count: int) -> str:
    """``, N with conflicting severities (CONFLICT)`` after a merged listing's count, when any."""
    return f", {count} with conflicting severities (CONFLICT)" if count else ""


commands: list[click.Command] = [findings, replay]
