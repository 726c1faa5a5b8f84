"""``subagent-bus listen``: real processes against a real Redis; a directive is printed once, never lost."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from adapter_kit import CLI, Bus, exited, open_bus, run, wait_until

from agents.delivery import GROUP
from agents.inbox_listener import CONSUMER, _block_ms
from agents.listen import EXIT_ERROR, EXIT_RECEIVED, EXIT_TIMEOUT, PAUSE_AFTER_ENV, PAUSE_ENV, write_out
from bus.cli import EXIT_INTERRUPTED
from bus.directives import AnswerItem, ClarificationResponse, LaunchReason, LaunchRequest
from bus.embedded import RedisProcess
from bus.envelope import Envelope, decode, new_envelope
from bus.events import AgentStarted
from bus.keys import dead_stream_for
from bus.publisher import Publisher

GROUP_ID = "g-listen"


def directive(agent: str, answer: str = "Use JWT") -> Envelope:
    payload = ClarificationResponse(
        answers=[AnswerItem(question_id="Q1", question="Which auth?", answer=answer)], next_step="Go on"
    )
    return new_envelope(payload, agent_id=agent, group_id=GROUP_ID, source="coordinator")


def listener(
    url: str,
    agent: str,
    *args: str,
    env: dict[str, str] | None = None,
    stdout: int = subprocess.PIPE,
    group: str = GROUP_ID,
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [CLI, "listen", "--agent-id", agent, "--group", group, *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        env={**os.environ, "SUBAGENT_BUS_REDIS_URL": url, **(env or {})},
    )


def delivering_adapter(url: str, agent: str, output: Path, responses: Path) -> subprocess.Popen[bytes]:
    """``adapter watch`` delivering the agent's directives into a response file."""
    return subprocess.Popen(
        [
            CLI,
            "adapter",
            "watch",
            str(output),
            "--agent-id",
            agent,
            "--group",
            GROUP_ID,
            "--deliver",
            f"file:{responses}",
        ],
        stderr=subprocess.DEVNULL,
        env={**os.environ, "SUBAGENT_BUS_REDIS_URL": url},
    )


async def blocked_clients(bus: Bus, n: int) -> None:
    """Wait until ``n`` clients are blocked in a read (the listeners are waiting on the inbox)."""

    async def blocked() -> bool:
        info: dict[str, Any] = await bus.client.info("clients")
        return int(info["blocked_clients"]) >= n

    await wait_until(blocked, 20, f"{n} blocked listener(s)")


async def finish(process: subprocess.Popen[bytes], seconds: float = 20) -> tuple[int, bytes, bytes]:
    code = await exited(process, seconds)
    assert process.stdout is not None and process.stderr is not None
    return code, process.stdout.read(), process.stderr.read()


def decode_prompt(out: bytes) -> str:
    return out.decode().removesuffix("\n")


async def pending(bus: Bus, agent: str) -> int:
    summary: Any = await bus.client.xpending(bus.inbox(GROUP_ID, agent), GROUP)
    return int(summary["pending"])


async def test_directive_published_after_start_is_printed_and_consumed(redis_url: str) -> None:
    async with open_bus(redis_url) as bus:
        process = listener(redis_url, "a1")
        await blocked_clients(bus, 1)
        sent = directive("a1")
        await Publisher(bus.client, bus.keys).send_directive(sent)
        code, out, err = await finish(process)
        assert code == EXIT_RECEIVED, err
        assert out.decode() == sent.payload.render() + "\n"  # type: ignore[union-attr]
        assert await pending(bus, "a1") == 0
        again = listener(redis_url, "a1", "--timeout", "0.2")
        assert (await finish(again))[:2] == (EXIT_TIMEOUT, b"")  # consumed: not printed twice


async def test_json_prints_the_envelope(bus_url: str) -> None:
    """Also on a Redis Cluster: the inbox, its group and its dead letters share one hash slot."""
    async with open_bus(bus_url) as bus:
        sent = directive("a2")
        await Publisher(bus.client, bus.keys).send_directive(sent)  # before the listener starts
        code, out, err = await finish(listener(bus_url, "a2", "--json", "--timeout", "10"))
        assert code == EXIT_RECEIVED, err
        assert out.count(b"\n") == 1
        assert decode(out.strip()) == sent


async def test_timeout_zero_takes_a_waiting_directive_without_waiting(redis_url: str) -> None:
    async with open_bus(redis_url) as bus:
        sent = directive("a0")
        await Publisher(bus.client, bus.keys).send_directive(sent)
        code, out, err = await finish(listener(redis_url, "a0", "--timeout", "0"))
        assert code == EXIT_RECEIVED, err
        assert out.decode() == sent.payload.render() + "\n"  # type: ignore[union-attr]
        assert (await finish(listener(redis_url, "a0", "--timeout", "0")))[:2] == (EXIT_TIMEOUT, b"")


async def test_timeout_exits_3_without_output(redis_url: str) -> None:
    async with open_bus(redis_url):  # the namespace exists: something has used it
        pass
    code, out, err = await finish(listener(redis_url, "a3", "--timeout", "0.3"))
    assert (code, out) == (EXIT_TIMEOUT, b"")
    assert b"no directive" in err


async def test_a_listener_that_waits_says_when_its_group_or_agent_is_unknown(redis_url: str) -> None:
    # a mistyped --group or --agent-id would wait for ever without a word
    env = {"SUBAGENT_BUS_REDIS_URL": redis_url}
    started = new_envelope(AgentStarted(name="auditor"), agent_id="known", group_id=GROUP_ID)
    async with open_bus(redis_url) as bus:
        await Publisher(bus.client, bus.keys).publish(started)
    code, _, err = await run([CLI, "coordinator", "--burst", "--redis-url", redis_url])
    assert code == 0, err
    said = {}
    for agent, group in (("known", GROUP_ID), ("unknown", GROUP_ID), ("known", "typo")):
        code, out, err = await finish(listener(redis_url, agent, "--timeout", "1.5", group=group, env=env))
        assert (code, out) == (EXIT_TIMEOUT, b"")
        said[agent, group] = err.decode()
    assert "waiting all the same" not in said["known", GROUP_ID]
    assert (
        f"group '{GROUP_ID}' has no agent 'unknown' yet, as far as the coordinators know: waiting all the "
        "same (check --agent-id and --group)"
    ) in said["unknown", GROUP_ID]
    assert "no group 'typo' is known to the coordinators yet" in said["known", "typo"]


async def test_a_namespace_that_does_not_exist_is_an_error_and_stays_absent(redis_url: str) -> None:
    code, out, err = await finish(listener(redis_url, "a5", "--namespace", "typo", "--timeout", "30"))
    assert (code, out) == (EXIT_ERROR, b"")
    assert b"Error: namespace 'typo' does not exist on this server" in err
    async with open_bus(redis_url) as bus:
        assert await bus.client.keys("*typo*") == []


async def test_unreachable_server_is_exit_1(tmp_path: Path) -> None:
    code, out, err = await finish(listener("redis://127.0.0.1:1/0", "a4", "--timeout", "1"))
    assert (code, out) == (EXIT_ERROR, b"")
    assert b"Error:" in err


async def test_missing_identity_is_a_usage_error() -> None:
    process = await asyncio.create_subprocess_exec(
        CLI,
        "listen",
        "--group",
        GROUP_ID,
        stderr=asyncio.subprocess.PIPE,
        env={k: v for k, v in os.environ.items() if k != "SUBAGENT_BUS_AGENT_ID"},
    )
    _, err = await process.communicate()
    assert await process.wait() == 2
    assert b"--agent-id" in err


async def test_two_racing_listeners_exactly_one_prints(redis_url: str) -> None:
    async with open_bus(redis_url) as bus:
        first = listener(redis_url, "a5", "--timeout", "4")
        second = listener(redis_url, "a5", "--timeout", "4")
        await blocked_clients(bus, 2)
        sent = directive("a5")
        await Publisher(bus.client, bus.keys).send_directive(sent)
        results = sorted([(await finish(first))[:2], (await finish(second))[:2]])
        prompt = (sent.payload.render() + "\n").encode()  # type: ignore[union-attr]
        assert results == [(EXIT_RECEIVED, prompt), (EXIT_TIMEOUT, b"")]
        assert await pending(bus, "a5") == 0


def _said(marker: Path) -> str | None:
    return marker.read_text() if marker.exists() else None


async def killed_paused(bus: Bus, redis_url: str, agent: str, hook: str, marker: Path) -> tuple[bytes, bytes]:
    """A listener with the pause ``hook`` killed there, with -9, once it took a directive sent to
    ``agent``: what it printed, and the directive's prompt."""
    doomed = listener(redis_url, agent, "--claim-idle-ms", "200", env={hook: str(marker)})
    await blocked_clients(bus, 1)
    sent = directive(agent)
    entry_id = await Publisher(bus.client, bus.keys).send_directive(sent)

    async def paused() -> bool:
        return _said(marker) == entry_id

    await wait_until(paused, 20, "the listener to take the directive and pause")
    doomed.send_signal(signal.SIGKILL)
    code, out, _ = await finish(doomed)
    assert code == -signal.SIGKILL
    assert await pending(bus, agent) == 1  # taken, never acknowledged
    return out, (sent.payload.render() + "\n").encode()  # type: ignore[union-attr]


async def test_listener_killed_before_printing_leaves_the_directive_for_the_next(
    redis_url: str, tmp_path: Path
) -> None:
    async with open_bus(redis_url) as bus:
        out, prompt = await killed_paused(bus, redis_url, "a6", PAUSE_ENV, tmp_path / "paused")
        assert out == b""

        code, out, err = await finish(listener(redis_url, "a6", "--claim-idle-ms", "200", "--timeout", "15"))
        assert (code, out) == (EXIT_RECEIVED, prompt), err
        assert await pending(bus, "a6") == 0


async def test_listener_killed_after_printing_leaves_the_directive_to_be_printed_once_more(
    redis_url: str, tmp_path: Path
) -> None:
    """At least once: printed, then killed before the acknowledgement, the directive is printed by the
    next listener again, and consumed by it."""
    async with open_bus(redis_url) as bus:
        out, prompt = await killed_paused(bus, redis_url, "a8", PAUSE_AFTER_ENV, tmp_path / "paused")
        assert out == prompt

        code, out, err = await finish(listener(redis_url, "a8", "--claim-idle-ms", "200", "--timeout", "15"))
        assert (code, out) == (EXIT_RECEIVED, prompt), err
        assert await pending(bus, "a8") == 0
        code, out, _ = await finish(listener(redis_url, "a8", "--timeout", "0"))
        assert (code, out) == (EXIT_TIMEOUT, b"")


async def test_a_listener_started_after_a_kill_prints_the_older_directive_first(
    redis_url: str, tmp_path: Path
) -> None:
    marker = tmp_path / "paused"
    async with open_bus(redis_url) as bus:
        doomed = listener(redis_url, "a7", env={PAUSE_ENV: str(marker)})
        await blocked_clients(bus, 1)
        publisher = Publisher(bus.client, bus.keys)
        sent = [directive("a7", "first"), directive("a7", "second")]
        await publisher.send_directive(sent[0])

        async def paused() -> bool:
            return marker.exists()

        await wait_until(paused, 20, "the listener to read the directive and pause")
        doomed.send_signal(signal.SIGKILL)
        await finish(doomed)
        await publisher.send_directive(sent[1])

        # started at once: the first directive is not stale yet (2 s), and is still printed first
        outs = [(await finish(listener(redis_url, "a7", "--timeout", "15")))[1] for _ in sent]
        assert outs == [d.payload.render().encode() + b"\n" for d in sent]  # type: ignore[union-attr]
        assert await pending(bus, "a7") == 0


async def test_a_listener_outlives_a_server_restart(fresh_redis: RedisProcess) -> None:
    url = fresh_redis.url
    process = listener(url, "a9", "--timeout", "60")
    async with open_bus(url) as bus:
        await blocked_clients(bus, 1)
    fresh_redis.kill()  # the blocked read fails: the listener retries
    fresh_redis.start()
    async with open_bus(url) as bus:
        sent = directive("a9")
        await Publisher(bus.client, bus.keys).send_directive(sent)
        code, out, err = await finish(process, 60)
        assert code == EXIT_RECEIVED, err
        assert decode_prompt(out) == sent.payload.render()  # type: ignore[union-attr]
        assert b"retrying" in err


async def test_a_listener_whose_server_stays_down_times_out_as_for_a_silent_one(
    fresh_redis: RedisProcess,
) -> None:
    """Exit status 3, not 1: a runner that polls again on a timeout gave up during a restart."""
    process = listener(fresh_redis.url, "a15", "--timeout", "3")
    async with open_bus(fresh_redis.url) as bus:
        await blocked_clients(bus, 1)
    fresh_redis.kill()
    code, out, err = await finish(process, 30)
    assert (code, out) == (EXIT_TIMEOUT, b""), err
    assert b"the server could not be reached within 3s" in err and b"retrying" in err


async def test_a_listener_rides_out_a_server_that_stops_answering(fresh_redis: RedisProcess) -> None:
    assert fresh_redis.process is not None
    server = fresh_redis.process.pid
    process = listener(fresh_redis.url, "a10", "--socket-timeout", "2", "--timeout", "120")
    assert process.stderr is not None
    async with open_bus(fresh_redis.url) as bus:
        await blocked_clients(bus, 1)
    os.kill(server, signal.SIGSTOP)  # connections are still accepted (the kernel's backlog); no reply comes
    try:
        line = b""
        while b"retrying" not in line:
            line = await asyncio.wait_for(asyncio.to_thread(process.stderr.readline), 30)
            assert line, "the listener's stderr closed"
        assert b"TimeoutError" in line
    finally:
        os.kill(server, signal.SIGCONT)
    async with open_bus(fresh_redis.url) as bus:
        sent = directive("a10")
        await Publisher(bus.client, bus.keys).send_directive(sent)
        code, out, err = await finish(process, 60)
        assert code == EXIT_RECEIVED, err
        assert decode_prompt(out) == sent.payload.render()  # type: ignore[union-attr]
        assert await pending(bus, "a10") == 0


async def test_an_acknowledgement_a_server_pause_holds_up_is_waited_for(fresh_redis: RedisProcess) -> None:
    """A failover pauses writes for a few seconds: a listener that gave up on its acknowledgement after a
    second and left dropped it, and the next listener printed the directive again."""
    async with open_bus(fresh_redis.url) as bus:
        long = directive("a14", answer="x" * 1_000_000)  # more than a pipe holds: printing blocks
        await Publisher(bus.client, bus.keys).send_directive(long)
        process = listener(fresh_redis.url, "a14", "--timeout", "30")
        assert process.stdout is not None
        # (unbuffered: communicate below reads the descriptor, not a buffer)
        first = await asyncio.to_thread(os.read, process.stdout.fileno(), 1000)  # it has the entry, prints it
        await bus.client.execute_command("CLIENT", "PAUSE", "3000", "WRITE")
        rest, err = await asyncio.to_thread(process.communicate, timeout=30)
        assert process.returncode == EXIT_RECEIVED, err
        printed = decode_prompt(first + rest)
        assert printed == long.payload.render()  # type: ignore[union-attr]
        assert b"not acknowledged" not in err
        assert await pending(bus, "a14") == 0


@pytest.mark.usefixtures("interruptible")
async def test_ctrl_c_exits_130(redis_url: str) -> None:
    async with open_bus(redis_url) as bus:
        process = listener(redis_url, "a11")
        await blocked_clients(bus, 1)
        process.send_signal(signal.SIGINT)
        assert await finish(process) == (EXIT_INTERRUPTED, b"", b"\n")


async def test_other_entries_are_skipped_and_bad_ones_dead_lettered(redis_url: str) -> None:
    async with open_bus(redis_url) as bus:
        inbox = bus.inbox(GROUP_ID, "a7")
        launch = LaunchRequest(request_id="r1", new_agent_id="x", reason=LaunchReason.DELEGATION, task="t")
        publisher = Publisher(bus.client, bus.keys)
        await publisher.send_directive(new_envelope(launch, agent_id="a7", group_id=GROUP_ID))
        await bus.client.xadd(inbox, {"data": b"{not json"})
        await bus.client.xadd(inbox, {"payload": b"x", "note": b"y"})
        sent = directive("a7")
        await publisher.send_directive(sent)
        code, out, err = await finish(listener(redis_url, "a7", "--json", "--timeout", "10"))
        assert code == EXIT_RECEIVED, err
        assert decode(out.strip()) == sent
        assert await pending(bus, "a7") == 0
        dead: Any = await bus.client.xrange(dead_stream_for(inbox), "-", "+")
        reasons = [fields[b"reason"].decode() for _, fields in dead]
        assert len(reasons) == 3
        assert reasons[0].startswith("LAUNCH ") and reasons[0].endswith(" is not a directive for an agent")
        assert reasons[1].startswith("not JSON")
        assert reasons[2] == "entry has no 'data' field (fields: note, payload)"


async def test_a_delivering_adapter_and_a_listener_share_the_directives(
    redis_url: str, tmp_path: Path
) -> None:
    """Both follow the inbox in one consumer group: every directive reaches the agent exactly once."""
    responses = tmp_path / "responses.md"
    async with open_bus(redis_url) as bus:
        sent = [directive("a8", answer=f"answer {i}") for i in range(4)]
        publisher = Publisher(bus.client, bus.keys)
        for envelope in sent[:2]:
            await publisher.send_directive(envelope)
        code, out, err = await finish(listener(redis_url, "a8", "--json", "--timeout", "10"))
        assert code == EXIT_RECEIVED, err
        by_listener = decode(out.strip())
        adapter = delivering_adapter(redis_url, "a8", tmp_path / "out.log", responses)
        try:
            for envelope in sent[2:]:
                await publisher.send_directive(envelope)

            async def delivered() -> bool:
                return responses.exists() and responses.read_text().count("end of directive") == 3

            await wait_until(delivered, 20, "the adapter to deliver the other three")
        finally:
            adapter.send_signal(signal.SIGTERM)
            await exited(adapter, 20)
        text = responses.read_text()
        assert by_listener == sent[0]
        for envelope in sent[1:]:
            assert text.count(f"end of directive {envelope.id} ") == 1
        assert sent[0].id not in text
        assert await pending(bus, "a8") == 0


def test_block_ms() -> None:
    assert _block_ms(None, 2000) == 1000
    assert _block_ms(None, 200) == 100
    assert _block_ms(0.05, 2000) == 50
    assert _block_ms(0.0, 2000) is None
    assert _block_ms(-1.0, 2000) is None
    assert _block_ms(0.0001, 2000) == 1  # never 0, which would block for ever


def test_listeners_share_the_adapters_group() -> None:
    assert (GROUP, CONSUMER) == ("adapter", "listen")


async def test_a_directive_that_cannot_be_printed_stays_for_the_next_listener(redis_url: str) -> None:
    async with open_bus(redis_url) as bus:
        sent = directive("a1")
        await Publisher(bus.client, bus.keys).send_directive(sent)
        read_end, write_end = os.pipe()
        os.close(read_end)  # nobody reads: printing fails with a broken pipe
        broken = listener(redis_url, "a1", stdout=write_end)
        os.close(write_end)
        assert await exited(broken, 20) == EXIT_ERROR
        assert broken.stderr is not None
        assert b"it stays in the inbox for the next listener" in broken.stderr.read()
        code, out, err = await finish(listener(redis_url, "a1", "--claim-idle-ms", "200", "--timeout", "15"))
        assert code == EXIT_RECEIVED, err
        assert out.decode() == sent.payload.render() + "\n"  # type: ignore[union-attr]
        assert await pending(bus, "a1") == 0


def _reader_of(count: int) -> subprocess.Popen[bytes]:
    """A process that reads ``count`` bytes of its stdin and exits."""
    return subprocess.Popen([sys.executable, "-c", f"import os; os.read(0, {count})"], stdin=subprocess.PIPE)


async def test_a_directive_its_reader_took_only_part_of_stays_for_the_next_listener(redis_url: str) -> None:
    """A reader that goes away in the middle of a large directive (`| head -c 100`) leaves it unread: a
    short write is a failure, not a print."""
    async with open_bus(redis_url) as bus:
        sent = directive("a9", answer="y" * 120_000)  # more than a pipe holds
        await Publisher(bus.client, bus.keys).send_directive(sent)
        reader = _reader_of(100)
        assert reader.stdin is not None
        cut = listener(redis_url, "a9", stdout=reader.stdin.fileno())
        reader.stdin.close()
        assert await exited(cut, 20) == EXIT_ERROR
        reader.wait(timeout=20)
        assert cut.stderr is not None
        assert b"it stays in the inbox for the next listener" in cut.stderr.read()
        whole = listener(redis_url, "a9", "--claim-idle-ms", "200", "--timeout", "15")
        out, err = await asyncio.to_thread(whole.communicate, timeout=30)  # read while it prints
        assert whole.returncode == EXIT_RECEIVED, err
        assert out.decode() == sent.payload.render() + "\n"  # type: ignore[union-attr]


def _stdout_closed(url: str, agent: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [CLI, "listen", "--agent-id", agent, "--group", GROUP_ID, "--timeout", "5"],
        stderr=subprocess.PIPE,
        env={**os.environ, "SUBAGENT_BUS_REDIS_URL": url},
        preexec_fn=lambda: os.close(1),  # noqa: PLW1509 (the test starts no threads)
    )


async def test_a_listener_with_stdout_closed_takes_nothing(redis_url: str) -> None:
    async with open_bus(redis_url) as bus:
        await Publisher(bus.client, bus.keys).send_directive(directive("a6"))
        closed = _stdout_closed(redis_url, "a6")
        assert await exited(closed, 20) == EXIT_ERROR
        assert closed.stderr is not None
        assert closed.stderr.read() == b"Error: stdout is closed: nothing could print the directive\n"
        inbox = bus.inbox(GROUP_ID, "a6")
        assert (await bus.client.xlen(inbox), await bus.client.xinfo_groups(inbox)) == (1, [])


async def test_a_listener_given_another_group_takes_nothing_from_the_agents_inbox(redis_url: str) -> None:
    """The inbox is the agent id's on the group's shard: a mistyped --group that lands on the same shard
    says so and leaves the directive to a listener of its own group, and waits on for its own (one entry
    naming another group, which anyone with the adapter's user may add, ended every wait for good)."""
    async with open_bus(redis_url) as bus:
        shard = bus.keys.shard_of(GROUP_ID)
        typo = next(g for g in (f"g-{i}" for i in range(1000)) if bus.keys.shard_of(g) == shard)
        sent = directive("a1")
        await Publisher(bus.client, bus.keys).send_directive(sent)
        wrong = listener(redis_url, "a1", "--timeout", "3", "--claim-idle-ms", "200", group=typo)
        code, out, err = await finish(wrong)
        assert (code, out) == (EXIT_TIMEOUT, b""), err
        said = f"is for group {GROUP_ID!r}, not {typo!r}: left for a listener of that group"
        assert err.decode().count(said) == 1, err  # once, though it looked at it for 3 s
        [held] = await bus.client.xpending_range(bus.inbox(GROUP_ID, "a1"), GROUP, "-", "+", 1)
        assert held["times_delivered"] == 0  # its read undone: its own group's adapter bounds the reads
        code, out, err = await finish(listener(redis_url, "a1", "--claim-idle-ms", "200", "--timeout", "15"))
        assert code == EXIT_RECEIVED, err
        assert out.decode() == sent.payload.render() + "\n"  # type: ignore[union-attr]
        assert await pending(bus, "a1") == 0


def test_a_directive_printed_to_a_file_that_could_not_be_synced_is_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error the sync reports (the disk failed, or was full: the bytes are not on it) is not to be
    taken for a print: the directive would be acknowledged, and lost. A file system that cannot sync
    at all is no failure."""

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fsync", failing)
    with (tmp_path / "out").open("wb") as out, pytest.raises(OSError, match="Input/output error"):
        write_out(b"prompt\n", out)

    def unsupported(fd: int) -> None:
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))

    monkeypatch.setattr(os, "fsync", unsupported)
    with (tmp_path / "out").open("wb") as out:
        write_out(b"prompt\n", out)
    assert (tmp_path / "out").read_bytes() == b"prompt\n"


async def test_a_directive_being_printed_to_a_slow_reader_is_not_taken_by_another_listener(
    redis_url: str,
) -> None:
    """The print blocked while the reader did not read (a long directive, more than a pipe holds), and
    the entry, idle meanwhile, was taken by the next listener, which printed it too."""
    sent = directive("a11", answer="JWT, because " + "x" * 300_000)
    async with open_bus(redis_url) as bus:
        await Publisher(bus.client, bus.keys).send_directive(sent)
        slow = listener(redis_url, "a11")  # its stdout is not read until the end
        try:

            async def read() -> bool:
                with contextlib.suppress(redis.exceptions.ResponseError):  # no group yet
                    return await pending(bus, "a11") == 1
                return False

            await wait_until(read, 20, "the first listener to read the directive")
            second = listener(redis_url, "a11", "--timeout", "4")
            assert (await finish(second, 30))[:2] == (EXIT_TIMEOUT, b"")  # held by the first
            assert slow.stdout is not None
            printed = await asyncio.to_thread(slow.stdout.read)
            assert await exited(slow, 20) == EXIT_RECEIVED
            assert decode_prompt(printed) == sent.payload.render()  # type: ignore[union-attr]
        finally:
            slow.kill()
            slow.wait()
