"""``subagent-bus tail --group``: a tail that stops (``--count``, ``--timeout``) leaves the entries it was
delivered and did not print to the group's next reader, first and in order, not for 30 s to nobody; one
killed with SIGKILL loses nothing."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

from adapter_kit import exited, spawn, wait_until
from workers.kit import connected, progress

from bus.envelope import Envelope, encode
from bus.keys import Keys, StreamKind, open_namespace
from bus.publisher import Publisher

CLI = str(Path(sys.executable).parent / "subagent-bus")
GROUPS = ["alpha", "beta", "gamma", "epsilon"]  # shards 2, 3, 1 and 0 of 4


def _tail(url: str, *args: str) -> list[str]:
    """A tail in a process of its own: its consumer is named after its pid, so each one is a new consumer."""
    command = [CLI, "tail", "--redis-url", url, "--namespace", "tl", "--json", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_group_tails_with_count_print_every_entry_once_in_order(bus_url: str) -> None:
    envelopes = [progress(i, group_id=GROUPS[i % len(GROUPS)]) for i in range(9)]

    async def publish() -> list[str]:
        async with connected(bus_url) as client:
            return await Publisher(client, await open_namespace(client, "tl", 4)).publish_many(envelopes)

    ids = asyncio.run(publish())
    keys = Keys("tl", 4)

    def order(pair: tuple[str, int]) -> tuple[int, int, int]:
        ms, seq = pair[0].split("-")
        return int(ms), int(seq), pair[1]

    placed = {encode(e).decode(): (i, keys.shard_of(e.group_id)) for e, i in zip(envelopes, ids, strict=True)}
    oldest_first = sorted(placed, key=lambda line: order(placed[line]))
    printed = _tail(bus_url, "--group", "viewers", "--from", "0", "--count", "2")
    while len(printed) < len(envelopes):
        more = _tail(bus_url, "--group", "viewers", "--count", "3", "--timeout", "2")
        assert more, f"nothing more after {len(printed)} of {len(envelopes)}"
        printed += more
    assert printed == oldest_first

    async def pending() -> int:
        async with connected(bus_url) as client:
            return sum(
                [(await client.xpending(f"{{tl:{s}}}:signals", "viewers"))["pending"] for s in range(4)]
            )

    assert asyncio.run(pending()) == 0


def test_a_tail_restarted_under_its_consumer_name_prints_what_a_killed_one_held_first(bus_url: str) -> None:
    envelopes = [progress(i, group_id="epsilon") for i in range(5)]  # one shard: one order
    stream = Keys("tl", 4).stream(Keys("tl", 4).shard_of("epsilon"), StreamKind.SIGNALS)

    async def publish(items: list[Envelope]) -> None:
        async with connected(bus_url) as client:
            await Publisher(client, await open_namespace(client, "tl", 4)).publish_many(items)

    async def held_by_a_killed_tail() -> None:
        async with connected(bus_url) as client:  # read, never printed nor acknowledged
            await client.xgroup_create(stream, "viewers", id="0")
            await client.xreadgroup("viewers", "dashboard", {stream: ">"}, count=2)

    asyncio.run(publish(envelopes[:2]))
    asyncio.run(held_by_a_killed_tail())
    asyncio.run(publish(envelopes[2:]))
    printed = _tail(
        bus_url, "--group", "viewers", "--consumer", "dashboard", "--count", "5", "--timeout", "5"
    )
    assert printed == [encode(e).decode() for e in envelopes]


async def test_a_group_tail_killed_again_and_again_loses_nothing_and_keeps_each_shard_s_order(
    bus_url: str, tmp_path: Path
) -> None:
    # Printed, then acknowledged: a kill between the two prints a batch again, and nothing is lost.
    envelopes = [progress(i, group_id=GROUPS[i % len(GROUPS)]) for i in range(12_000)]
    async with connected(bus_url) as client:
        keys = await open_namespace(client, "tl", 4)
        publisher = Publisher(client, keys)
        for start in range(0, len(envelopes), 1000):
            await publisher.publish_many(envelopes[start : start + 1000])
    shard_of = {encode(e).decode(): keys.shard_of(e.group_id) for e in envelopes}
    printed = tmp_path / "printed"
    command = [CLI, "tail", "--redis-url", bus_url, "--namespace", "tl", "--json", "--group", "viewers"]
    command += ["--consumer", "dashboard", "--from", "0"]

    def lines() -> list[str]:
        return printed.read_text().splitlines()

    kills = 4
    with printed.open("ab") as sink:
        for _ in range(kills):
            before = len(lines())
            tail = spawn(command, stdout=sink, stderr=subprocess.DEVNULL)

            async def printing(before: int = before) -> bool:
                return len(await asyncio.to_thread(lines)) > before

            await wait_until(printing, 30, "the tail to print")
            tail.kill()
            assert await exited(tail, 10) == -signal.SIGKILL
        held = set(lines())
        assert len(held) < len(envelopes), "every kill came after the tail had printed everything"
        rest = spawn([*command, "--timeout", "1"], stdout=sink, stderr=subprocess.DEVNULL)
        assert await exited(rest, 60) == 0
    everything = lines()
    assert set(everything) == set(shard_of), "an entry was never printed"
    assert len(everything) - len(shard_of) <= kills * 4 * 100  # at most a batch a shard a kill, again
    for shard in range(4):
        first_seen = list(dict.fromkeys(line for line in everything if shard_of[line] == shard))
        assert first_seen == [encode(e).decode() for e in envelopes if keys.shard_of(e.group_id) == shard]

    async def pending() -> int:
        async with connected(bus_url) as client:
            return sum(
                [
                    (await client.xpending(keys.stream(s, StreamKind.SIGNALS), "viewers"))["pending"]
                    for s in range(4)
                ]
            )

    assert await pending() == 0


async def test_a_group_lost_under_a_tail_started_at_the_end_is_made_again_there_not_at_the_start(
    bus_url: str, tmp_path: Path
) -> None:
    """Made again at "0" when nothing was printed yet, the group had the tail print the whole stream."""
    async with connected(bus_url) as client:
        keys = await open_namespace(client, "tl", 4)
        publisher = Publisher(client, keys)
        await publisher.publish_many([progress(i, group_id=GROUPS[i % len(GROUPS)]) for i in range(20)])
        printed = tmp_path / "printed"
        command = [CLI, "tail", "--redis-url", bus_url, "--namespace", "tl", "--json", "--group", "live"]
        streams = [keys.stream(s, StreamKind.SIGNALS) for s in range(4)]
        with printed.open("ab") as sink:
            tail = spawn(command, stdout=sink, stderr=subprocess.DEVNULL)
            try:

                async def reading() -> bool:
                    return all([await client.xinfo_groups(s) for s in streams])

                await wait_until(reading, 30, "the tail's group on every shard")
                for stream in streams:  # an operator's clean-up, or a server that lost it
                    await client.xgroup_destroy(stream, "live")
                later = progress(99, group_id="alpha")
                await publisher.publish_many([later])

                async def shown() -> bool:
                    return bool(await asyncio.to_thread(printed.read_text))

                await wait_until(shown, 30, "the tail to print the entry published after it started")
            finally:
                tail.kill()
                await exited(tail, 10)
    assert printed.read_text().splitlines() == [encode(later).decode()]
