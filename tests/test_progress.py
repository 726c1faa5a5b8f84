"""Long work in the CLI: the progress line itself (pure), what the long commands feed it, and the collector
they keep from walking what they build (real Redis)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import os
import tracemalloc
from functools import partial
from pathlib import Path

import click
import orjson
import pytest
from click.testing import CliRunner, Result
from workers.kit import connected

from agents.adapter import connect_bus
from agents.findings_import import import_file
from bus.cli import main
from bus.display import json_bytes
from bus.envelope import encode, new_envelope
from bus.findings import Finding
from bus.keys import StreamKind, open_namespace
from bus.progress import Progress
from bus.publisher import Publisher
from bus.settings import Settings
from coordinator import findings_cli, human_publish, view, views_cli
from coordinator.policy import Policy
from coordinator.service import Coordinator, CoordinatorOptions
from coordinator.view import iter_findings, load_groups


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_line_appears_after_the_delay_is_rate_limited_and_erased_at_the_end() -> None:
    terminal, clock = Terminal(), Clock()
    with Progress(stream=terminal, delay=1.0, interval=0.5, clock=clock) as progress:
        progress.update("quick")
        assert terminal.getvalue() == ""  # a short run prints nothing
        clock.now += 1.0
        progress.update("1 of 3")
        clock.now += 0.2
        progress.update("too soon")
        clock.now += 0.3
        progress.update("2 of 3")
    assert terminal.getvalue() == "\r\x1b[K1 of 3\r\x1b[K2 of 3\r\x1b[K"


def test_nothing_is_written_when_the_stream_is_not_a_terminal() -> None:
    stream, clock = io.StringIO(), Clock()
    with Progress(stream=stream, delay=0, clock=clock) as progress:
        for n in range(3):
            clock.now += 10
            progress.update(f"{n}")
    assert stream.getvalue() == ""


def test_a_run_that_showed_nothing_erases_nothing() -> None:
    terminal = Terminal()
    with Progress(stream=terminal, delay=60) as progress:
        progress.update("never shown")
    assert terminal.getvalue() == ""


async def test_iter_findings_reports_every_entry_read_of_the_shard(redis_url: str) -> None:
    bus = await connect_bus(Settings.from_url(redis_url), "reader", "g-progress")
    shard = bus.keys.shard_of("g-progress")
    other = next(g for g in (f"other-{i}" for i in range(1000)) if bus.keys.shard_of(g) == shard)
    pages: list[int] = []
    try:
        for n in range(25):  # one in five of another group that shares the shard's stream
            envelope = new_envelope(
                Finding(title=f"f{n}"), agent_id="a", group_id=other if n % 5 == 0 else "g-progress"
            )
            await bus.client.xadd(bus.keys.stream(shard, StreamKind.FINDINGS), {"data": encode(envelope)})
        read = iter_findings(bus.client, bus.keys, "g-progress", page=10, on_page=pages.append)
        titles = [finding.title async for _, finding, _, _ in read]
    finally:
        await bus.client.aclose()
    assert titles == [f"f{n}" for n in range(25) if n % 5]
    assert pages == [10, 20, 25]


async def test_import_file_reports_each_batch_up_to_the_end_of_the_file(
    redis_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "findings.jsonl"
    lines = [orjson.dumps({"agent": "sec", "title": f"t{n}"}) + b"\n" for n in range(1200)]
    path.write_bytes(b"".join(lines))
    reached: list[tuple[int, int]] = []
    bus = await connect_bus(Settings.from_url(redis_url), "importer", "g-import")
    try:
        report = await import_file(bus, path, on_batch=lambda offset, line: reached.append((offset, line)))
    finally:
        await bus.client.aclose()
    assert report.published == 1200
    size = path.stat().st_size
    assert reached == [
        (sum(map(len, lines[:500])), 501),
        (sum(map(len, lines[:1000])), 1001),
        (size, 1201),
    ]


def _merged_group(url: str, group: str, count: int) -> None:
    """A group of ``count`` merged findings, each at a place of its own, applied by a coordinator."""

    async def fill() -> None:
        async with connected(url) as client:
            keys = await open_namespace(client, "sbus", None)
            findings = [
                new_envelope(Finding(title=f"f{n}", file=f"m{n}.py", line=1), agent_id="a", group_id=group)
                for n in range(count)
            ]
            await Publisher(client, keys).publish_many(findings)
            coordinator = Coordinator(client, keys, Policy(), CoordinatorOptions(name="c"))
            assert await coordinator.run(burst=True) == count

    asyncio.run(fill())


async def test_load_groups_reports_the_merged_findings_read_page_by_page(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await asyncio.to_thread(_merged_group, redis_url, "g-merged", 300)
    monkeypatch.setattr(view, "_SLOT_PAGE", 50)
    pages: list[int] = []
    async with connected(redis_url) as client:
        keys = await open_namespace(client, "sbus", None, create=False)
        (state,) = await load_groups(client, keys, "g-merged", on_page=pages.append)
    assert len(state.findings) == 300
    assert len(pages) > 2  # a count the server takes as a hint: about 50 a page
    assert pages == sorted(pages)
    assert pages[-1] >= 300  # a rehash in between may return some twice


@pytest.mark.parametrize("command", [["findings", "--merged"], ["replay", "--group", "g-shown"]])
def test_the_merged_listings_show_how_far_they_are(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    """Reading and combining a group's merged findings took seconds with nothing on the terminal."""
    _merged_group(redis_url, "g-shown", 200)
    terminal = Terminal()
    monkeypatch.setattr(findings_cli, "Progress", partial(Progress, stream=terminal, delay=0, interval=0))
    cli = {c.name: c for c in findings_cli.commands}[command[0]]
    result = CliRunner().invoke(cli, [*command[1:], "--redis-url", redis_url])
    assert result.exit_code == 0, result.output
    assert "200 merged finding" in result.output
    shown = terminal.getvalue()
    assert "combining the 200 " in shown
    if command[0] == "findings":
        assert "reading the merged findings: 200" in shown
    else:
        assert "reading the findings stream: 200 entries" in shown
    assert shown.endswith("\r\x1b[K")  # erased before the listing


def _collections(command: click.Command, args: list[str]) -> tuple[Result, list[int]]:
    """``command``'s result with ``args``, and the generation of each collection that ran meanwhile."""
    collections: list[int] = []

    def collecting(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(collecting)
    try:
        result = CliRunner().invoke(command, args)
    finally:
        gc.callbacks.remove(collecting)
    assert gc.isenabled()  # on again once the command is done
    return result, collections


@pytest.mark.parametrize(
    "command", [["findings", "--merged"], ["findings", "--jsonl"], ["replay", "--group", "g-gc"]]
)
def test_the_findings_listings_run_no_collection_while_they_build(redis_url: str, command: list[str]) -> None:
    """The collector, run by allocation counts, walked the models of every finding read again and again:
    most of a listing's time for a group of 200 000 merged findings, and none of them garbage."""
    _merged_group(redis_url, "g-gc", 2000)
    cli = {c.name: c for c in findings_cli.commands}[command[0]]
    result, collections = _collections(cli, [*command[1:], "--redis-url", redis_url])
    assert result.exit_code == 0, result.output
    # at most one, once the command is done: the collector is on again, and its counts were kept
    assert len(collections) <= 1, collections


def _queue(redis_url: str, group: str, count: int) -> None:
    """``count`` findings of agent ``a`` in ``group``, queued: no coordinator runs."""

    async def queue() -> None:
        async with connected(redis_url) as client:
            keys = await open_namespace(client, "sbus", None)
            findings = [
                new_envelope(Finding(title=f"f{n}", file=f"q{n}.py", line=1), agent_id="a", group_id=group)
                for n in range(count)
            ]
            await Publisher(client, keys).publish_many(findings)

    asyncio.run(queue())


def test_a_human_command_checked_against_a_long_queue_runs_no_collection(redis_url: str) -> None:
    """A command is checked against the queue applied by the rules (coordinator.queued): a model per
    queued finding, which the collector, run by allocation counts, walked again and again."""
    _queue(redis_url, "g-q", 2000)
    args = ["resolve", "a", "--resolution", "done", "--group", "g-q", "--redis-url", redis_url]
    result, collections = _collections(main, args)
    assert "has no open blocker" in result.output, result.output
    assert len(collections) <= 1, collections


def test_a_human_command_and_the_inbox_show_how_far_they_are_in_a_long_queue(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading and applying 200 000 queued entries took a command seconds with nothing on the terminal."""
    _queue(redis_url, "g-long", 2500)
    terminal = Terminal()
    shown = partial(Progress, stream=terminal, delay=0, interval=0)
    monkeypatch.setattr(human_publish, "Progress", shown)
    monkeypatch.setattr(views_cli, "Progress", shown)
    args = ["resolve", "a", "--resolution", "done", "--group", "g-long", "--redis-url", redis_url]
    result = CliRunner().invoke(main, args)
    assert "has no open blocker" in result.output, result.output
    lines = terminal.getvalue()
    assert "reading what no coordinator has applied yet: 2,500 entries" in lines
    assert "applying what is queued for group g-long: 2,000 of 2,500 entries" in lines
    assert lines.endswith("\r\x1b[K")  # erased before the command says anything

    terminal.seek(0)
    terminal.truncate()
    result = CliRunner().invoke(main, ["inbox", "--redis-url", redis_url])
    assert result.exit_code == 0, result.output
    assert "reading what no coordinator has applied yet: 2,500 entries" in terminal.getvalue()


def _peak(url: str, args: list[str]) -> int:
    """The most memory the findings command held (traced) while it ran with ``args``, its output written
    to /dev/null: a CliRunner keeps all of it, which would count as the command's."""
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        tracemalloc.start()
        try:
            findings_cli.findings.main([*args, "--redis-url", url], standalone_mode=False)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()


def test_a_merged_json_listing_is_written_record_by_record(redis_url: str) -> None:
    """The records, then their JSON, then its text were built whole before a byte was written: a JSON
    listing of 500 000 merged findings held 2.6 GB, a text listing of them 1.7 GB."""
    _merged_group(redis_url, "g-json-1", 2000)
    outputs: tuple[list[str], ...] = ([], ["--json"], ["--jsonl"])
    before = [_peak(redis_url, ["--merged", *output]) for output in outputs]
    _merged_group(redis_url, "g-json-2", 2000)
    text, *json = (
        (_peak(redis_url, ["--merged", *o]) - b) / 2000 for o, b in zip(outputs, before, strict=True)
    )
    assert all(per_finding < text + 200 for per_finding in json), (text, json)  # the models, one record
    listed = CliRunner().invoke(findings_cli.findings, ["--merged", "--json", "--redis-url", redis_url])
    records = orjson.loads(listed.output)
    assert len(records) == 4000
    assert listed.output == json_bytes(records, indent=True).decode() + "\n"  # as when it was built whole


@pytest.mark.parametrize("output", [[], ["--json"], ["--jsonl"]])
def test_a_merged_listing_of_every_group_holds_one_group_at_a_time(redis_url: str, output: list[str]) -> None:
    """Every group's state was read before any was combined, and every group's view kept until the last
    was printed: a listing of many groups held all of them at once. Each is printed once combined."""
    _merged_group(redis_url, "g-each-0", 1)
    before = _peak(redis_url, ["--merged", "--group", "g-each-0", *output])
    _merged_group(redis_url, "g-each-1", 2000)
    one = (_peak(redis_url, ["--merged", "--group", "g-each-1", *output]) - before) / 2000
    for n in (2, 3, 4):
        _merged_group(redis_url, f"g-each-{n}", 2000)
    more = (_peak(redis_url, ["--merged", *output]) - before) / 2000 - one
    assert more / 3 < 0.1 * one, (more / 3, one)  # a group more: printed, then gone
    listed = CliRunner().invoke(findings_cli.findings, ["--merged", *output, "--redis-url", redis_url])
    assert listed.output.count("m1999.py:1") == 4  # every group's last merged finding


@pytest.mark.parametrize("output", [[], ["--json"], ["--jsonl"]])
def test_a_raw_listing_keeps_what_it_prints_of_each_finding(redis_url: str, output: list[str]) -> None:
    """Each finding's model was kept until the listing was printed: 1 GB for 500 000 findings in text,
    1.6 GB in JSON; its line or record takes a fraction of that."""
    _merged_group(redis_url, "g-raw-1", 2000)
    before = _peak(redis_url, output)
    _merged_group(redis_url, "g-raw-2", 2000)
    per_finding = (_peak(redis_url, output) - before) / 2000
    listed = CliRunner().invoke(findings_cli.findings, [*output, "--redis-url", redis_url])
    assert per_finding < len(listed.output) / 4000 + 400, per_finding  # a model: over 1 100
