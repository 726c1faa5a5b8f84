"""``subagent-bus tail`` against real servers."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
import redis
from adapter_kit import CLI, wait_until
from click.testing import CliRunner, Result
from workers.kit import connected, progress, progresses

from bus.cli import EXIT_INTERRUPTED, main
from bus.consumer import dead_letter_fields
from bus.envelope import Envelope, encode, new_envelope
from bus.events import Tick
from bus.keys import Keys, StreamKind, open_namespace
from bus.local_server import stop_local_server
from bus.publisher import Publisher
from bus.signals import Progress

GROUPS = ["alpha", "beta", "gamma", "delta", "x", "y", "z"]


def _publish(url: str, envelopes: Sequence[Envelope], kind: StreamKind = StreamKind.SIGNALS) -> list[str]:
    async def go() -> list[str]:
        async with connected(url) as client:
            keys = await open_namespace(client, "tl", 4)
            return await Publisher(client, keys).publish_many(envelopes, kind)

    return asyncio.run(go())


def _tail(url: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["tail", "--redis-url", url, "--namespace", "tl", *args])


def _spread(count: int, start: int = 0) -> list[Envelope]:
    return [progress(i, group_id=GROUPS[i % len(GROUPS)]) for i in range(start, start + count)]


def _order(entry_id: str) -> tuple[int, int]:
    ms, seq = entry_id.split("-")
    return int(ms), int(seq)


def test_from_0_count_n_json_prints_exactly_the_oldest_n_across_shards(bus_url: str) -> None:
    envelopes = _spread(40)
    ids = _publish(bus_url, envelopes)
    keys = Keys("tl", 4)
    assert len({keys.shard_of(e.group_id) for e in envelopes}) > 1
    result = _tail(bus_url, "--from", "0", "--count", "15", "--json")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 15
    by_data = {
        encode(e): (entry_id, keys.shard_of(e.group_id)) for e, entry_id in zip(envelopes, ids, strict=True)
    }
    printed = [by_data[line.encode()] for line in lines]  # each line is an envelope exactly as stored
    oldest = sorted(by_data.values(), key=lambda pair: (*_order(pair[0]), pair[1]))[:15]
    assert printed == oldest


def test_all_published_envelopes_come_back(redis_url: str) -> None:
    envelopes = _spread(250)
    _publish(redis_url, envelopes)
    result = _tail(redis_url, "--from", "0", "--count", "250", "--json")
    assert sorted(result.stdout.splitlines()) == sorted(encode(e).decode() for e in envelopes)


def test_timeout_stops_a_quiet_tail(redis_url: str) -> None:
    _publish(redis_url, progresses(3))
    result = _tail(redis_url, "--timeout", "0.3", "--json")  # --from $: only new entries
    assert (result.exit_code, result.stdout) == (0, "")
    result = _tail(redis_url, "--from", "0", "--timeout", "0.3")
    assert result.exit_code == 0
    assert len(result.stdout.splitlines()) == 3


def test_readable_lines_and_skipped_garbage(redis_url: str) -> None:
    _publish(redis_url, [progress(1, group_id="alpha")])
    shard = Keys("tl", 4).shard_of("alpha")
    raw = redis.Redis.from_url(redis_url)
    raw.xadd(f"{{tl:{shard}}}:signals", {"data": b"garbage"})
    raw.close()
    _publish(redis_url, [progress(2, group_id="alpha")])
    result = _tail(redis_url, "--from", "0", "--count", "2")
    assert result.exit_code == 0, result.output
    first, second = result.stdout.splitlines()
    assert f" s{shard} " in first
    assert "signal/PROGRESS agent-1@alpha" in first
    assert '"message":"step 1"' in first
    assert "step 2" in second
    assert "skipped entry" in result.stderr
    assert "not JSON" in result.stderr


def test_a_group_tail_acknowledges_what_it_printed(bus_url: str) -> None:
    _publish(bus_url, _spread(12))
    result = _tail(bus_url, "--group", "viewers", "--from", "0", "--count", "12", "--json")
    assert len(result.stdout.splitlines()) == 12
    again = _tail(bus_url, "--group", "viewers", "--from", "0", "--timeout", "0.3", "--json")
    assert again.stdout == ""
    _publish(bus_url, _spread(2, start=100))
    later = _tail(bus_url, "--group", "viewers", "--timeout", "0.3", "--json")
    assert len(later.stdout.splitlines()) == 2

    async def pending() -> int:
        async with connected(bus_url) as client:
            total = 0
            for shard in range(4):
                total += (await client.xpending(f"{{tl:{shard}}}:signals", "viewers"))["pending"]
            return total

    assert asyncio.run(pending()) == 0


def test_inbox_and_dead_streams(redis_url: str) -> None:
    directive = progress(7, group_id="beta", agent_id="worker-9")

    async def setup() -> None:
        async with connected(redis_url) as client:
            keys = await open_namespace(client, "tl", 4)
            await Publisher(client, keys).send_directive(directive)
            dead = keys.stream(keys.shard_of("beta"), StreamKind.DEAD)
            fields = dead_letter_fields(
                stream="s", entry_id="1-0", raw=b"\x00bad", reason="not JSON", deliveries=2
            )
            await client.xadd(dead, fields)  # type: ignore[arg-type]

    asyncio.run(setup())
    for extra in ([], ["--group-id", "beta"]):
        result = _tail(
            redis_url, "--stream", "inbox:worker-9", "--from", "0", "--count", "1", "--json", *extra
        )
        assert result.stdout.splitlines() == [encode(directive).decode()]
    result = _tail(redis_url, "--stream", "dead", "--from", "0", "--count", "1")
    assert "dead from s 1-0 after 2 deliveries: not JSON" in result.stdout
    result = _tail(redis_url, "--stream", "dead", "--from", "0", "--count", "1", "--json")
    record = orjson.loads(result.stdout)
    assert (record["reason"], record["entry_id"], record["deliveries"], record["data"]) == (
        "not JSON",
        "1-0",
        2,
        "\x00bad",
    )
    result = _tail(redis_url, "--stream", "dead", "--group", "g", "--from", "0", "--count", "1")
    assert "after 2 deliveries: not JSON" in result.stdout


def test_a_dead_letter_whose_count_is_no_number_or_beyond_64_bits_is_shown_as_text(redis_url: str) -> None:
    """Any adapter may append to a dead-letter stream: a count beyond 64 bits crashed the view, and no
    dead letter after it was shown."""
    counts = ["\u00b2", str(2**64), "9" * 5000, "7"]

    async def setup() -> None:
        async with connected(redis_url) as client:
            keys = await open_namespace(client, "tl", 4)
            for count in counts:
                fields = {"data": b'{"a": 1}', "reason": b"forged", "deliveries": count.encode()}
                await client.xadd(keys.stream(0, StreamKind.DEAD), fields)  # type: ignore[arg-type]

    asyncio.run(setup())
    result = _tail(redis_url, "--stream", "dead", "--from", "0", "--count", "4", "--json")
    assert [orjson.loads(line)["deliveries"] for line in result.stdout.splitlines()] == [*counts[:3], 7]


@pytest.mark.parametrize("stream", ["nope", "inbox:"])
def test_a_bad_stream_is_a_usage_error(redis_url: str, stream: str) -> None:
    _publish(redis_url, _spread(1))
    result = _tail(redis_url, "--stream", stream)
    assert result.exit_code == 2
    assert "--stream" in result.output


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["--from", "abc"], "--from"),
        (["--from", "-1"], "--from"),
        (["--from", "18446744073709551616-0"], "--from"),
        (["--group", ""], "--group"),
        (["--stream", "inbox:a", "--group", "g", "--group-id", ""], "--group-id"),
    ],
)
def test_bad_start_ids_and_empty_group_names_are_usage_errors(
    redis_url: str, args: list[str], hint: str
) -> None:
    _publish(redis_url, _spread(1))
    result = _tail(redis_url, *args, "--timeout", "0.2")
    assert result.exit_code == 2, result.output
    assert hint in result.output


def test_group_id_without_an_inbox_is_a_usage_error_not_ignored(redis_url: str) -> None:
    _publish(redis_url, _spread(1))
    result = _tail(redis_url, "--group-id", "alpha", "--from", "0", "--timeout", "0.2")
    assert result.exit_code == 2
    assert "--group-id" in result.output
    assert "inbox:AGENT" in result.output


def test_a_group_on_an_inbox_without_its_task_group_is_a_usage_error_that_creates_nothing(
    redis_url: str,
) -> None:
    """It made the inbox stream and a consumer group on every shard, for an inbox that is on one."""
    _publish(redis_url, _spread(1))
    raw = redis.Redis.from_url(redis_url)
    try:
        keys_before = set(raw.keys())
        result = _tail(redis_url, "--stream", "inbox:anyone", "--group", "mine", "--timeout", "0.2")
        assert result.exit_code == 2, result.output
        assert "--group on inbox:AGENT needs --group-id" in result.output
        assert set(raw.keys()) == keys_before
        given = _tail(
            redis_url, "--stream", "inbox:anyone", "--group", "mine", "--group-id", "g", "--timeout", "0.2"
        )
        assert given.exit_code == 0, given.output
        assert len(set(raw.keys()) - keys_before) == 1  # the inbox of the shard of group g only
    finally:
        raw.close()


def test_a_namespace_that_does_not_exist_is_an_error_and_is_not_created(redis_url: str) -> None:
    result = CliRunner().invoke(
        main, ["tail", "--redis-url", redis_url, "--namespace", "typo", "--timeout", "1"]
    )
    assert result.exit_code == 1
    assert "namespace 'typo' does not exist" in result.stderr
    raw = redis.Redis.from_url(redis_url)
    assert raw.exists("{typo}:meta") == 0  # a later `coordinator --shards 32` can still create it
    raw.close()


async def test_follow_prints_entries_published_after_it_started(redis_url: str) -> None:
    async with connected(redis_url) as client:
        keys = await open_namespace(client, "tl", 4)
        publisher = Publisher(client, keys)
        await publisher.publish_many(_spread(3))
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "from bus.cli import main; main()",
            "tail", "--redis-url", redis_url, "--namespace", "tl", "--from", "0", "--count", "5", "--json",
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert process.stdout is not None
        try:
            early = [await asyncio.wait_for(process.stdout.readline(), 30) for _ in range(3)]
            await publisher.publish_many(_spread(2, start=3))
            rest = await asyncio.wait_for(process.stdout.read(), 30)
            assert await asyncio.wait_for(process.wait(), 30) == 0
        finally:
            if process.returncode is None:
                process.kill()
        lines = [line.rstrip(b"\n") for line in early] + rest.splitlines()
        assert sorted(lines) == sorted(encode(e) for e in _spread(5))


@pytest.mark.usefixtures("interruptible")
async def test_ctrl_c_ends_a_follow_with_exit_130(redis_url: str) -> None:
    async with connected(redis_url) as client:
        await Publisher(client, await open_namespace(client, "tl", 4)).publish_many(_spread(1))
    process = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "subagent-bus"),
        "tail", "--redis-url", redis_url, "--namespace", "tl", "--from", "0", "--json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    try:
        assert await asyncio.wait_for(process.stdout.readline(), 30) == encode(_spread(1)[0]) + b"\n"
        async with connected(redis_url) as client:  # caught up: following every shard

            async def following() -> bool:
                return int((await client.info("clients"))["blocked_clients"]) >= 4

            await wait_until(following, 30, "tail to block on the 4 shards")
        process.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(process.wait(), 30) == EXIT_INTERRUPTED
    finally:
        if process.returncode is None:
            process.kill()
    assert await process.stderr.read() == b"\n"  # no "Aborted!", no traceback


def test_without_a_url_the_local_server_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SUBAGENT_BUS_REDIS_URL", raising=False)
    try:
        result = CliRunner().invoke(main, ["tail", "--timeout", "0.2"])
        assert "using local Redis at redis://127.0.0.1:" in result.stderr
        assert "namespace 'sbus' does not exist" in result.stderr  # a fresh server: nothing created it
    finally:
        stop_local_server(tmp_path / ".subagent-bus")


def test_control_characters_from_the_stream_cannot_break_lines_or_reach_the_terminal(redis_url: str) -> None:
    evil = "evil\x1b[2J\nFAKE LINE\r"
    shard = Keys("tl", 4).shard_of("alpha")
    raw = redis.Redis.from_url(redis_url)
    raw.xadd(f"{{tl:{shard}}}:signals", {"data": b'{"id": "\x1b[2J\n"}'})  # reported on stderr
    _publish(redis_url, [progress(1, group_id="alpha", agent_id=evil)])
    fields = dead_letter_fields(
        stream=f"s\x1b]0;title\x07{evil}", entry_id="1-0", raw=b"x", reason=f"bad {evil}", deliveries=1
    )
    raw.xadd(f"{{tl:{shard}}}:dead", fields)  # type: ignore[arg-type]
    raw.close()
    for stream in ("signals", "dead"):
        result = _tail(redis_url, "--stream", stream, "--from", "0", "--count", "1")
        assert result.exit_code == 0, result.output
        assert len(result.stdout.splitlines()) == 1, result.stdout
        for text in (result.stdout, result.stderr):
            assert not [c for c in text if (ord(c) < 32 and c != "\n") or 0x7F <= ord(c) <= 0x9F], text
        assert "evil\\x1b[2J\\nFAKE LINE\\r" in result.stdout


def test_json_output_is_one_line_per_envelope_even_when_stored_with_line_breaks(redis_url: str) -> None:
    envelope = progress(1, group_id="alpha")
    spread = orjson.dumps(orjson.loads(encode(envelope)), option=orjson.OPT_INDENT_2)
    assert b"\n" in spread
    # numbers orjson would not read back as written: printed as stored
    spread = spread.replace(
        b'"payload": {', b'"payload": {\r\n "big": 123456789012345678901234567890,\n "far": 1e400,'
    )
    _publish(redis_url, [progress(0, group_id="alpha")])
    raw = redis.Redis.from_url(redis_url)
    raw.xadd(f"{{tl:{Keys('tl', 4).shard_of('alpha')}}}:signals", {"data": spread})
    raw.close()
    result = _tail(redis_url, "--from", "0", "--count", "2", "--json")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    assert json.loads(lines[1])["payload"]["big"] == 123456789012345678901234567890
    assert '"far": 1e400' in lines[1]
    written = json.loads(lines[1].replace("1e400", "1"))
    assert written == {**orjson.loads(encode(envelope)), "payload": {**written["payload"]}}
    assert written["payload"] == {
        **orjson.loads(encode(envelope))["payload"],
        "big": 123456789012345678901234567890,
        "far": 1,
    }


def test_an_integer_beyond_64_bits_in_a_signal_is_shown_not_a_crash(redis_url: str) -> None:
    # a signal's extra field may hold one (YAML, or any publisher's JSON); orjson writes none
    huge = 123456789012345678901234567890
    payload = Progress(agent_id="agent-1", percent=5, big=huge)
    _publish(
        redis_url,
        [new_envelope(payload, agent_id="agent-1", group_id="alpha"), progress(1, group_id="alpha")],
    )
    for options in ((), ("--json",)):
        result = _tail(redis_url, "--from", "0", "--count", "2", *options)
        assert result.exit_code == 0, result.output
        first, second = result.stdout.splitlines()  # the entry after it is shown too
        assert str(huge) in first and "step 1" in second


@pytest.mark.parametrize("group", ["coordinator", "launchers", "adapter", ""])
def test_the_bus_s_own_consumer_groups_are_refused(redis_url: str, group: str) -> None:
    # read in the coordinators' group, an entry would be acknowledged and never applied
    _publish(redis_url, [progress(0, group_id="alpha")])
    result = _tail(redis_url, "--stream", "signals", "--group", group, "--from", "0", "--count", "1")
    assert result.exit_code == 2 and "Invalid value for '--group'" in result.stderr, result.output
    raw = redis.Redis.from_url(redis_url)
    try:
        shard = Keys("tl", 4).shard_of("alpha")
        assert raw.xinfo_groups(f"{{tl:{shard}}}:signals") == []  # nothing read, no group made
    finally:
        raw.close()


@pytest.mark.parametrize("depth", [255, 600])
def test_a_dead_letter_of_json_nested_deeper_than_json_is_written_shows_as_text(
    redis_url: str, depth: int
) -> None:
    # orjson reads arrays nested up to 1024 deep but writes 255 at most, the line's object counted:
    # such data was a crash
    deep = b"[" * depth + b"]" * depth
    result = _dead_letter_json(redis_url, deep)
    shown = orjson.loads(result.stdout)
    assert shown["data"] == deep.decode() and "data_base64" not in shown


@pytest.mark.parametrize("start", ["yesterday", "99999999999999999999999-0", "1-99999999999999999999999"])
def test_a_from_that_is_no_stream_id_is_a_usage_error(redis_url: str, start: str) -> None:
    result = _tail(redis_url, "--from", start)
    assert result.exit_code == 2
    assert f"'{start}' is not 0, $, MS or MS-SEQ (each number below 2^64)" in result.output


def test_a_dead_letter_s_json_is_shown_as_stored(redis_url: str) -> None:
    """An integer wider than 64 bits in it stays the number it was, line breaks between its tokens go."""
    data = b'{"type": "PROGRESS",\n "big": 123456789012345678901234567890}'
    [line] = _dead_letter_json(redis_url, data).stdout.splitlines()
    assert json.loads(line)["data"] == {"type": "PROGRESS", "big": 123456789012345678901234567890}


def _dead_letter_json(redis_url: str, data: bytes) -> Result:
    """``tail --stream dead --json`` of one dead letter whose data is ``data``."""
    fields = dead_letter_fields(stream="s", entry_id="1-0", raw=data, reason="invalid envelope", deliveries=1)
    _publish(redis_url, [])  # creates the namespace
    raw = redis.Redis.from_url(redis_url)
    raw.xadd(f"{{tl:{Keys('tl', 4).shard_of('alpha')}}}:dead", fields)  # type: ignore[arg-type]
    raw.close()
    result = _tail(redis_url, "--stream", "dead", "--from", "0", "--count", "1", "--json")
    assert result.exit_code == 0, result.output
    return result


def test_a_timeout_is_not_held_off_by_the_coordinators_ticks(redis_url: str) -> None:
    """A coordinator adds a TICK to every shard's signals stream every few seconds: counted as entries,
    they kept `tail --timeout` from ever ending on a running bus."""
    _publish(redis_url, _spread(1))  # the namespace
    keys = Keys("tl", 4)
    stop = threading.Event()

    def ticking() -> None:
        client = redis.Redis.from_url(redis_url)
        try:
            while not stop.wait(0.1):
                now = datetime.now(UTC)
                tick = new_envelope(Tick(now=now), agent_id="c1", group_id="*", source="tick", ts=now)
                client.xadd(keys.stream(0, StreamKind.SIGNALS), {"data": encode(tick)})
        finally:
            client.close()

    ticker = threading.Thread(target=ticking)
    ticker.start()
    try:
        args = [
            "tail",
            "--stream",
            "signals",
            "--timeout",
            "1",
            "--redis-url",
            redis_url,
            "--namespace",
            "tl",
        ]
        done = subprocess.run([CLI, *args], capture_output=True, check=False, timeout=60)
    finally:
        stop.set()
        ticker.join()
    assert done.returncode == 0, done.stderr
    assert b"TICK" in done.stdout  # shown all the same
